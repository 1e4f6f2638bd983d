// A grouped bar chart of a comparison: one group per problem, one bar per
// backend, bar height = % of the machine limit that applies to the problem.
// Plain SVG that opens in any browser.
#ifndef ATTNKIT_BENCHMARKS_REPORT_SVG_H_
#define ATTNKIT_BENCHMARKS_REPORT_SVG_H_

#include <string>

#include "benchmarks/records.pb.h"

namespace attnkit {

std::string ReportToSvg(const CompareReport& report);

}  // namespace attnkit

#endif  // ATTNKIT_BENCHMARKS_REPORT_SVG_H_

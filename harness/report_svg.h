// A comparison as a chart and as a page. The chart: one group per problem,
// one bar per backend that ran (the `auto` row included), bar height = % of
// the machine limit that applies to that problem (peak FMA, or read
// bandwidth when memory-bound, named under the problem), each bar labelled
// with its median time and % value; a backend that ran nowhere is one note,
// not empty bars. Plain SVG, sized to its data. The page: the chart, the
// results table and the machine fingerprint in one self-contained HTML file.
#ifndef ATTNKIT_HARNESS_REPORT_SVG_H_
#define ATTNKIT_HARNESS_REPORT_SVG_H_

#include <string>

#include "harness/records.pb.h"

namespace attnkit {

std::string ReportToSvg(const CompareReport& report);
std::string ReportToHtml(const CompareReport& report);

// Markup escaping for both (&, <, >, ").
std::string EscapeMarkup(const std::string& s);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_REPORT_SVG_H_

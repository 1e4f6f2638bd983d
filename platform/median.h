// The median of a sample of timings, for benchmarks and reports: the middle
// value, or the mean of the two middle ones for an even count (0 for none).
// By value: the caller's order is left as it was.
#ifndef ATTNKIT_PLATFORM_MEDIAN_H_
#define ATTNKIT_PLATFORM_MEDIAN_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace attnkit {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  const double upper = v[n / 2];
  if (n % 2 == 1) return upper;
  // The lower middle one: the largest of the values before the upper.
  return 0.5 * (*std::max_element(v.begin(), v.begin() + n / 2) + upper);
}

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_MEDIAN_H_

// Measured machine limits for the benchmarks' "% of limit" counters: the FMA
// throughput of a register-resident loop and the streaming read bandwidth,
// both on the best Highway target and on several threads at once.
#ifndef ATTNKIT_BENCHMARKS_MACHINE_PEAK_H_
#define ATTNKIT_BENCHMARKS_MACHINE_PEAK_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnkit {

// Runs the FMA loop on `threads` threads at once; returns total GFLOP/s.
double MeasurePeakGflops(int threads, double seconds = 0.2);
// Sums a buffer of `bytes` split over `threads` threads; returns GB/s.
double MeasureReadGBps(int threads, size_t bytes, int repeats = 3);
// The Highway target the two loops run on, e.g. "AVX2".
std::string PeakTargetName();

}  // namespace attnkit

#endif  // ATTNKIT_BENCHMARKS_MACHINE_PEAK_H_

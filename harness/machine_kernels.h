// Kernels that measure the machine itself: peak FMA throughput of one Highway
// target and streaming read bandwidth. Plain C++ declarations; the Highway
// code is in machine_kernels-inl.h, compiled once per target.
#ifndef ATTNKIT_HARNESS_MACHINE_KERNELS_H_
#define ATTNKIT_HARNESS_MACHINE_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

// Targets compiled into this binary and supported by the CPU, best first.
std::vector<int64_t> AvailableHighwayTargets();
std::string HighwayTargetName(int64_t target);
// The target dynamic dispatch picks on this CPU.
std::string DispatchedHighwayTarget();

// Peak FMA throughput of `target` with `threads` threads, each running a
// register-resident loop of `iterations` x 10 independent FMAs (the default:
// about 25 ms a trial on one AVX-512 core): the best of `trials` runs, in
// GFLOP/s (2 FLOPs per lane per FMA). Not thread-safe (it switches targets).
inline constexpr int64_t kFmaLoopIterations = 20'000'000;
double MeasureFmaGflops(int64_t target, int threads, int trials = 3,
                        int64_t iterations = kFmaLoopIterations);

// Peak bf16 dot-product throughput (x86 vdpbf16ps, x86_dot.h) measured the
// same way (`iterations` x 16 instructions); 0 where the CPU has no
// AVX512_BF16.
inline constexpr int64_t kBF16DotLoopIterations = 10'000'000;
double MeasureBF16DotGflops(int threads, int trials = 3,
                            int64_t iterations = kBF16DotLoopIterations);

// Peak AMX bf16 throughput (x86 tdpbf16ps, x86_dot.h) measured the same
// way (`iterations` x 6 instructions); 0 where x86_dot::HaveAmxBF16() is
// false.
inline constexpr int64_t kAmxBF16LoopIterations = 1'000'000;
bool HaveAmxBF16Peak();  // x86_dot::HaveAmxBF16(): MeasureAmxBF16Gflops measures
double MeasureAmxBF16Gflops(int threads, int trials = 3,
                            int64_t iterations = kAmxBF16LoopIterations);

// Sums `n` floats with the best target (a streaming read); returns the sum
// so the compiler cannot drop the reads.
float StreamingSum(const float* data, size_t n);
// The same as four interleaved streams (see machine_kernels-inl.h): what
// MeasureReadGbps times.
float StreamingSumFourStreams(const float* data, size_t n);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_MACHINE_KERNELS_H_

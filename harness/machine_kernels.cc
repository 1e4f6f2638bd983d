#include "harness/machine_kernels.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "backends/highway/x86_dot.h"
#include "platform/hwy_target_cap.h"

// Compile machine_kernels-inl.h once per Highway target (order matters).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/machine_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "harness/machine_kernels-inl.h"
#include "hwy/highway.h"
// clang-format on

#if HWY_ONCE
namespace attnkit {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(SumFloats);
HWY_EXPORT(SumFloatsFourStreams);
HWY_EXPORT(CurrentTarget);

std::vector<int64_t> AvailableHighwayTargets() {
  return HighwayTargetList(SupportedHighwayTargets() & HWY_TARGETS);  // best first
}

std::string HighwayTargetName(int64_t target) { return hwy::TargetName(target); }

std::string DispatchedHighwayTarget() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)());
}

namespace {

// `loop` (which returns the FLOPs it did) on `threads` threads at once, the
// best of `trials` runs, in GFLOP/s.
template <class Loop>
double BestGflopsOnThreads(int threads, int trials, const Loop& loop) {
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<double> flops(threads);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&flops, &loop, t] { flops[t] = loop(); });
    }
    for (std::thread& th : pool) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds * 1e-9);
  }
  return best;
}

}  // namespace

double MeasureFmaGflops(int64_t target, int threads, int trials, int64_t iterations) {
  // Restrict dispatch to `target`, warm up on this thread (which also lets
  // Highway update its chosen target), then run on every thread at once.
  hwy::SetSupportedTargetsForTest(target);
  HWY_DYNAMIC_DISPATCH(FmaLoop)(iterations / 10);
  const double best = BestGflopsOnThreads(
      threads, trials, [iterations] { return HWY_DYNAMIC_DISPATCH(FmaLoop)(iterations); });
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU supports
  return best;
}

double MeasureBF16DotGflops(int threads, int trials, int64_t iterations) {
  if (!x86_dot::HaveBF16Dot()) return 0;
  x86_dot::BF16DotPeakLoop(iterations / 10);  // warm up
  return BestGflopsOnThreads(threads, trials,
                             [iterations] { return x86_dot::BF16DotPeakLoop(iterations); });
}

bool HaveAmxBF16Peak() { return x86_dot::HaveAmxBF16(); }

double MeasureAmxBF16Gflops(int threads, int trials, int64_t iterations) {
  if (!x86_dot::HaveAmxBF16()) return 0;
  x86_dot::AmxBF16PeakLoop(iterations / 10);  // warm up
  return BestGflopsOnThreads(threads, trials,
                             [iterations] { return x86_dot::AmxBF16PeakLoop(iterations); });
}

float StreamingSum(const float* data, size_t n) { return HWY_DYNAMIC_DISPATCH(SumFloats)(data, n); }

float StreamingSumFourStreams(const float* data, size_t n) {
  return HWY_DYNAMIC_DISPATCH(SumFloatsFourStreams)(data, n);
}

}  // namespace attnkit
#endif  // HWY_ONCE

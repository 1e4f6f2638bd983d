#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/machine_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `iters` steps of 12 independent FMA chains (enough to cover the latency of
// two FMA pipes); returns FLOPs done, and a sum so nothing is elided.
double FmaLoop(int64_t iters, float* sink) {
  const hn::ScalableTag<float> df;
  const auto mul = hn::Set(df, 0.999999f), add = hn::Set(df, 1e-7f);
  auto a0 = hn::Set(df, 1.0f), a1 = hn::Set(df, 1.1f), a2 = hn::Set(df, 1.2f);
  auto a3 = hn::Set(df, 1.3f), a4 = hn::Set(df, 1.4f), a5 = hn::Set(df, 1.5f);
  auto a6 = hn::Set(df, 1.6f), a7 = hn::Set(df, 1.7f), a8 = hn::Set(df, 1.8f);
  auto a9 = hn::Set(df, 1.9f), a10 = hn::Set(df, 2.0f), a11 = hn::Set(df, 2.1f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, mul, add);
    a1 = hn::MulAdd(a1, mul, add);
    a2 = hn::MulAdd(a2, mul, add);
    a3 = hn::MulAdd(a3, mul, add);
    a4 = hn::MulAdd(a4, mul, add);
    a5 = hn::MulAdd(a5, mul, add);
    a6 = hn::MulAdd(a6, mul, add);
    a7 = hn::MulAdd(a7, mul, add);
    a8 = hn::MulAdd(a8, mul, add);
    a9 = hn::MulAdd(a9, mul, add);
    a10 = hn::MulAdd(a10, mul, add);
    a11 = hn::MulAdd(a11, mul, add);
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                         hn::Add(hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)),
                                 hn::Add(hn::Add(a8, a9), hn::Add(a10, a11))));
  *sink = hn::GetLane(hn::SumOfLanes(df, s));
  return 24.0 * static_cast<double>(hn::Lanes(df)) * static_cast<double>(iters);
}

// Sum of n floats (n a multiple of 4 vectors), four independent chains.
float ReadSum(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  for (size_t i = 0; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::Load(df, p + i));
    s1 = hn::Add(s1, hn::Load(df, p + i + N));
    s2 = hn::Add(s2, hn::Load(df, p + i + 2 * N));
    s3 = hn::Add(s3, hn::Load(df, p + i + 3 * N));
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

int64_t Target() { return HWY_TARGET; }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "benchmarks/machine_peak.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"

namespace attnkit {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(ReadSum);
HWY_EXPORT(Target);

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::string PeakTargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(Target)()); }

double MeasurePeakGflops(int threads, double seconds) {
  float sink = 0;
  const int64_t calib = 1 << 20;
  double t0 = Now();
  HWY_DYNAMIC_DISPATCH(FmaLoop)(calib, &sink);
  const double per_iter = std::max(1e-10, (Now() - t0) / calib);
  const int64_t iters = static_cast<int64_t>(seconds / per_iter);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> flops(threads);
    std::vector<float> sinks(threads);
    std::vector<std::thread> pool;
    t0 = Now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { flops[t] = HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, &sinks[t]); });
    }
    for (auto& th : pool) th.join();
    const double elapsed = Now() - t0;
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / elapsed * 1e-9);
  }
  return best;
}

double MeasureReadGBps(int threads, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float) / 64 * 64;
  auto buf = hwy::AllocateAligned<float>(n);
  std::fill(buf.get(), buf.get() + n, 1.0f);
  const size_t per = n / threads / 64 * 64;
  double best = 0;
  std::vector<float> sinks(threads);
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<std::thread> pool;
    const double t0 = Now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sinks[t] = HWY_DYNAMIC_DISPATCH(ReadSum)(buf.get() + t * per, per); });
    }
    for (auto& th : pool) th.join();
    best = std::max(best, per * threads * sizeof(float) / (Now() - t0) * 1e-9);
  }
  return best;
}

}  // namespace attnkit
#endif  // HWY_ONCE

// Per-target bodies of machine_kernels.h. Include guard toggles per target.
#if defined(ATTNKIT_BENCHMARKS_MACHINE_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BENCHMARKS_MACHINE_KERNELS_INL_H_
#undef ATTNKIT_BENCHMARKS_MACHINE_KERNELS_INL_H_
#else
#define ATTNKIT_BENCHMARKS_MACHINE_KERNELS_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Ten independent accumulators hide the FMA latency (4 cycles x 2 ports).
double FmaLoop(int64_t iterations) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 1.0f), a1 = hn::Set(d, 1.1f), a2 = hn::Set(d, 1.2f), a3 = hn::Set(d, 1.3f),
       a4 = hn::Set(d, 1.4f), a5 = hn::Set(d, 1.5f), a6 = hn::Set(d, 1.6f), a7 = hn::Set(d, 1.7f),
       a8 = hn::Set(d, 1.8f), a9 = hn::Set(d, 1.9f);
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                           hn::Add(hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)), hn::Add(a8, a9)));
  // Keep the result alive without a store in the loop.
  volatile float sink = hn::GetLane(sum);
  (void)sink;
  return 2.0 * 10.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

float SumFloats(const float* HWY_RESTRICT data, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, data + i));
    s1 = hn::Add(s1, hn::LoadU(d, data + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, data + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, data + i + 3 * N));
  }
  float total = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) total += data[i];
  return total;
}

// Sums `n` floats as four streams walked in lockstep (data, data + n/4, ...),
// two vectors from each per step: as a kernel reading K and V of several
// heads does, it keeps more hardware prefetch streams and more loads in
// flight than one sequential walk. `n` is a multiple of 8 lanes' worth of
// four streams or the tail is summed plainly.
float SumFloatsFourStreams(const float* HWY_RESTRICT data, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t q = (n / 4) / (2 * N) * (2 * N);  // floats per stream
  const float* s0 = data;
  const float* s1 = data + q;
  const float* s2 = data + 2 * q;
  const float* s3 = data + 3 * q;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
  for (size_t i = 0; i < q; i += 2 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, s0 + i));
    a1 = hn::Add(a1, hn::LoadU(d, s0 + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, s1 + i));
    a3 = hn::Add(a3, hn::LoadU(d, s1 + i + N));
    a4 = hn::Add(a4, hn::LoadU(d, s2 + i));
    a5 = hn::Add(a5, hn::LoadU(d, s2 + i + N));
    a6 = hn::Add(a6, hn::LoadU(d, s3 + i));
    a7 = hn::Add(a7, hn::LoadU(d, s3 + i + N));
  }
  const auto sum =
      hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (size_t i = 4 * q; i < n; ++i) total += data[i];
  return total;
}

int64_t CurrentTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // include guard

// The x86 bf16 prefill kernels alone (backends/highway/x86_dot.h), operands
// in L1: one flash tile of 64 query rows x 64 keys at d 64 and d 128, as
// the FAST bf16 prefill issues it (BF16QDotK, then BF16WeightedSumV), one
// thread, the best of five rounds. Each is given as a share of the bf16
// dot-product peak (BF16DotPeakLoop) timed in the same run: what is left
// below it is the kernels' own overhead (loads, broadcasts, prologues and
// stores), where `phase_bench`'s q.k and p.v rates also hold the tile's
// calls around them. Zen 5 (AVX512_BF16), one thread, operands in L1:
// d 64 Q.K 1.01-1.03 us a tile (92-96 % of the peak), P.V 1.03-1.09 us
// (87-94 %); d 128 about 2.0 us each (94-99 %). In the FAST d 64 prefill
// (phase_bench, two threads) the same calls ran at 84 % (q.k) and 81 %
// (p.v, with the weights' packing): the gap to the f32 products' 90 % is
// around the kernels, not in their inner loops. On a CPU with AMX-BF16 the
// same tile also through AmxQDotK and AmxWeightedSumV, against the AMX peak.
//   bazel run //benchmarks:prefill_kernels_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/highway/x86_dot.h"
#include "benchmarks/best_of_rounds.h"

namespace attnkit {
namespace {

constexpr size_t kRows = 64, kKeys = 64;

int Main() {
  if (!x86_dot::HaveBF16Dot()) {
    std::printf("bf16 prefill kernels: this CPU has no AVX512_BF16\n");
    return 0;
  }
  // The peak: 16 independent vdpbf16ps a round, FLOPs per second.
  constexpr int64_t kPeakIters = 20000000;
  double peak_s = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    x86_dot::BF16DotPeakLoop(kPeakIters);
    peak_s = std::min(
        peak_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double peak = 64.0 * 16.0 * kPeakIters / peak_s;
  std::printf("bf16 dot-product peak, one thread: %.1f GFLOP/s\n", peak * 1e-9);
  // AMX's (AmxBF16PeakLoop: 6 independent tdpbf16ps a round), where the
  // CPU has it: AmxQDotK and AmxWeightedSumV are held to it.
  const bool amx = x86_dot::HaveAmxBF16();
  double amx_peak = 0;
  if (amx) {
    constexpr int64_t kAmxIters = 1000000;
    double amx_s = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto start = std::chrono::steady_clock::now();
      const double flops = x86_dot::AmxBF16PeakLoop(kAmxIters);
      amx_s = std::min(
          amx_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      amx_peak = flops;
    }
    amx_peak /= amx_s;
    std::printf("AMX bf16 peak, one thread: %.1f GFLOP/s\n", amx_peak * 1e-9);
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> mant(0, 127);
  auto bf16 = [&] { return static_cast<uint16_t>(0x3f80 + mant(rng)); };  // in [1, 2)
  for (size_t d : {size_t{64}, size_t{128}}) {
    std::vector<uint32_t> qp(d / 2 * kRows), pp(kKeys / 2 * kRows), vp(kKeys / 2 * d);
    std::vector<uint16_t> k(kKeys * d);
    for (uint32_t& x : qp) x = bf16() | uint32_t{bf16()} << 16;
    for (uint32_t& x : pp) x = bf16() | uint32_t{bf16()} << 16;
    for (uint32_t& x : vp) x = bf16() | uint32_t{bf16()} << 16;
    for (uint16_t& x : k) x = bf16();
    std::vector<float> s(kKeys * kRows), o(kRows * d, 0.0f), alpha(kRows, 1.0f);
    const double qk = BestSecondsPerCall(200000, [&] {
      x86_dot::BF16QDotK(qp.data(), kRows, k.data(), d, d, kRows, kKeys, 0.125f, s.data(), kRows);
    });
    const double pv = BestSecondsPerCall(200000, [&] {
      x86_dot::BF16WeightedSumV(pp.data(), kRows, vp.data(), d, kKeys / 2, alpha.data(), kRows, d,
                                o.data(), d);
    });
    const double flops = 2.0 * kRows * kKeys * static_cast<double>(d);  // each product
    std::printf(
        "d %3zu, %zu rows x %zu keys: Q.K %.3f us (%.0f %% of peak, BF16QDotK), "
        "P.V %.3f us (%.0f %%, BF16WeightedSumV)\n",
        d, kRows, kKeys, qk * 1e6, 100.0 * flops / qk / peak, pv * 1e6, 100.0 * flops / pv / peak);
    if (!amx) continue;
    const double amx_qk = BestSecondsPerCall(200000, [&] {
      x86_dot::AmxQDotK(qp.data(), kRows, k.data(), d, d, kRows, kKeys, 0.125f, s.data(), kRows);
    });
    const double amx_pv = BestSecondsPerCall(200000, [&] {
      x86_dot::AmxWeightedSumV(pp.data(), kRows, vp.data(), d, kKeys / 2, alpha.data(), kRows, d,
                               o.data(), d);
    });
    std::printf(
        "d %3zu, %zu rows x %zu keys: Q.K %.3f us (%.0f %% of the AMX peak, AmxQDotK), "
        "P.V %.3f us (%.0f %%, AmxWeightedSumV)\n",
        d, kRows, kKeys, amx_qk * 1e6, 100.0 * flops / amx_qk / amx_peak, amx_pv * 1e6,
        100.0 * flops / amx_pv / amx_peak);
  }
  return 0;
}

}  // namespace
}  // namespace attnkit

int main() { return attnkit::Main(); }

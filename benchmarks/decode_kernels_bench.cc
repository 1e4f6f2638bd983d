// The x86 decode kernels alone (backends/highway/x86_dot.h), rows in L1:
// nanoseconds a key for a 64-key tile of a group of 4 query rows at d 128,
// the best of five rounds, one thread. What each kernel costs once memory
// is out of the way: set against a decode's time per key per thread
// (`attnkit compare`), the rest is memory, softmax and tile set-up.
//   bazel run //benchmarks:decode_kernels_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/highway/x86_dot.h"

namespace attnkit {
namespace {

constexpr size_t kD = 128, kKeys = 64, kReps = 100000;

// The best of five rounds of kReps calls, in ns a key.
template <class F>
double NsPerKey(F&& call) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < kReps; ++r) {
      call();
      asm volatile("" : : : "memory");  // each call's stores stay
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s / (kReps * kKeys) * 1e9);
  }
  return best;
}

int Main() {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> i8(-127, 127), code(0, 119);  // fp8: finite E4M3 codes
  std::uniform_real_distribution<float> weight(0.01f, 1.0f);
  std::vector<float> p(kKeys * 4), o(4 * kD, 0.0f), s(kKeys * 4);
  for (float& x : p) x = weight(rng);
  const float alpha[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (x86_dot::HaveVnni()) {
    std::vector<int8_t> q(4 * kD), k(kKeys * kD), v(kKeys * kD);
    for (auto* x : {&q, &k, &v}) {
      for (int8_t& b : *x) b = static_cast<int8_t>(i8(rng));
    }
    const int32_t sum128[4] = {0, 0, 0, 0};  // any: timing only
    const float row_scale[4] = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
    std::vector<const int8_t*> rows(kKeys + 3);
    for (size_t j = 0; j < kKeys + 3; ++j) rows[j] = v.data() + (j < kKeys ? j : kKeys - 1) * kD;
    const double qk = NsPerKey([&] {
      x86_dot::VnniQDotK4(q.data(), kD, sum128, row_scale, k.data(), kD, kD, kKeys, s.data(), 4,
                          nullptr, 0, nullptr, 0, 0);
    });
    const double pv = NsPerKey([&] {
      x86_dot::WeightedQuadsV4(p.data(), kKeys, rows.data(), kD, kD, alpha, o.data(), kD);
    });
    std::printf("int8 (VNNI):  Q.K %.2f ns a key (VnniQDotK4), P.V %.2f (WeightedQuadsV4)\n", qk,
                pv);
  } else {
    std::printf("int8: this CPU has no AVX512_VNNI\n");
  }
  if (x86_dot::HaveAvxVnni()) {  // the AVX2 target's kernels
    std::vector<int8_t> q(4 * kD), k(kKeys * kD), v(kKeys * kD);
    for (auto* x : {&q, &k, &v}) {
      for (int8_t& b : *x) b = static_cast<int8_t>(i8(rng));
    }
    const int32_t sum128[4] = {0, 0, 0, 0};
    const float row_scale[4] = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
    std::vector<const int8_t*> rows(kKeys + 3);
    for (size_t j = 0; j < kKeys + 3; ++j) rows[j] = v.data() + (j < kKeys ? j : kKeys - 1) * kD;
    const double qk = NsPerKey([&] {
      x86_dot::AvxVnniQDotK4(q.data(), kD, sum128, row_scale, k.data(), kD, kD, kKeys, s.data(), 4,
                             nullptr, 0, nullptr, 0, 0);
    });
    const double pv = NsPerKey([&] {
      x86_dot::AvxVnniWeightedQuadsV4(p.data(), kKeys, rows.data(), kD, kD, alpha, o.data(), kD);
    });
    std::printf(
        "int8 (AVX-VNNI): Q.K %.2f ns a key (AvxVnniQDotK4), P.V %.2f "
        "(AvxVnniWeightedQuadsV4)\n",
        qk, pv);
  } else {
    std::printf("int8: this CPU has no AVX-VNNI\n");
  }
  if (x86_dot::HaveFp8BF16Dot()) {
    std::vector<uint16_t> qrow(kD), qb(4 * 4 * kD);
    for (uint16_t& x : qrow) x = static_cast<uint16_t>(0x3f80 + code(rng));  // bf16 in [1, 2)
    for (size_t r = 0; r < 4; ++r) x86_dot::Fp8QueryBlocks(qrow.data(), kD, qb.data() + r * 4 * kD);
    std::vector<uint8_t> k(kKeys * kD), v(kKeys * kD);
    for (auto* x : {&k, &v}) {
      for (uint8_t& b : *x) b = static_cast<uint8_t>(code(rng));
    }
    std::vector<const uint8_t*> rows(kKeys + 1);
    for (size_t j = 0; j < kKeys + 1; ++j) rows[j] = v.data() + (j < kKeys ? j : kKeys - 1) * kD;
    const double qk = NsPerKey([&] {
      x86_dot::Fp8QDotK4(qb.data(), 4 * kD, k.data(), kD, kD, kKeys, /*e4m3=*/true, 0.1f, s.data(),
                         nullptr, 0, nullptr, 0, 0);
    });
    const double pv = NsPerKey([&] {
      x86_dot::Fp8WeightedSumV4(p.data(), kKeys, rows.data(), kD, kD, /*e4m3=*/true, alpha,
                                o.data(), kD);
    });
    std::printf("fp8 (BF16):   Q.K %.2f ns a key (Fp8QDotK4), P.V %.2f (Fp8WeightedSumV4)\n", qk,
                pv);
  } else {
    std::printf("fp8: this CPU has no AVX512_BF16 with VBMI\n");
  }
  return 0;
}

}  // namespace
}  // namespace attnkit

int main() { return attnkit::Main(); }

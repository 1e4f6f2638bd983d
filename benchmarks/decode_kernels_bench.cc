// The x86 decode kernels alone (backends/highway/x86_dot.h), rows in L1:
// nanoseconds a key for a 64-key tile of a group of 4 query rows at d 128,
// the best of five rounds, one thread. What each kernel costs once memory
// is out of the way: set against a decode's time per key per thread
// (`attnkit compare`), the rest is memory, softmax and tile set-up.
//   bazel run //benchmarks:decode_kernels_bench
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/highway/x86_dot.h"
#include "benchmarks/best_of_rounds.h"

namespace attnkit {
namespace {

constexpr size_t kD = 128, kKeys = 64, kReps = 100000;

// The best of five rounds of kReps calls, in ns a key.
template <class F>
double NsPerKey(F&& call) {
  return BestSecondsPerCall(kReps, call) / kKeys * 1e9;
}

// The int8 kernels of one ISA (Q.K and P.V share their contracts across
// ISAs): random int8 Q, K and V rows, timed, printed under `name`.
using QDotK4Fn = void (*)(const int8_t*, size_t, const int32_t*, const float*, const int8_t*,
                          size_t, size_t, size_t, float*, size_t, const int8_t*, size_t,
                          const int8_t*, size_t, size_t, const x86_dot::L1Rows&);
using WeightedQuadsFn = bool (*)(const float*, size_t, const int8_t* const*, size_t, size_t,
                                 const float*, float*, size_t, const x86_dot::L1Rows&,
                                 const x86_dot::L1Rows&);
void TimeInt8(const char* name, QDotK4Fn qdotk4, const char* qk_name,
              WeightedQuadsFn weighted_quads, const char* pv_name, std::mt19937* rng,
              const std::vector<float>& p, float* s, float* o) {
  std::uniform_int_distribution<int> i8(-127, 127);
  // Rows 64-byte aligned, as attnkit's tensors are (core/tensor.h): rows
  // that straddle cache lines made VnniQDotK4 slower (Xeon with AMX: 4.0
  // -> 4.8 ns a key 16 bytes off).
  alignas(64) static int8_t q[4 * kD], k[kKeys * kD], v[kKeys * kD];
  for (int8_t* x : {q, k, v}) {
    for (size_t i = 0; i < (x == q ? 4 : kKeys) * kD; ++i) x[i] = static_cast<int8_t>(i8(*rng));
  }
  const int32_t sum128[4] = {0, 0, 0, 0};  // any: timing only
  const float row_scale[4] = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
  const float alpha[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<const int8_t*> rows(kKeys + 3);
  for (size_t j = 0; j < kKeys + 3; ++j) rows[j] = v + (j < kKeys ? j : kKeys - 1) * kD;
  const double qk = NsPerKey([&] {
    qdotk4(q, kD, sum128, row_scale, k, kD, kD, kKeys, s, 4, nullptr, 0, nullptr, 0, 0, {});
  });
  const double pv =
      NsPerKey([&] { weighted_quads(p.data(), kKeys, rows.data(), kD, kD, alpha, o, kD, {}, {}); });
  std::printf("int8 (%s): Q.K %.2f ns a key (%s), P.V %.2f (%s)\n", name, qk, qk_name, pv, pv_name);
}

int Main() {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> code(0, 119);  // fp8: finite E4M3 codes
  std::uniform_real_distribution<float> weight(0.01f, 1.0f);
  std::vector<float> p(kKeys * 4), o(4 * kD, 0.0f), s(kKeys * 4);
  for (float& x : p) x = weight(rng);
  const float alpha[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (x86_dot::HaveVnni()) {
    TimeInt8("VNNI", &x86_dot::VnniQDotK4, "VnniQDotK4", &x86_dot::WeightedQuadsV4,
             "WeightedQuadsV4", &rng, p, s.data(), o.data());
  } else {
    std::printf("int8: this CPU has no AVX512_VNNI\n");
  }
  if (x86_dot::HaveAvxVnni()) {  // the AVX2 target's kernels
    TimeInt8("AVX-VNNI", &x86_dot::AvxVnniQDotK4, "AvxVnniQDotK4", &x86_dot::AvxVnniWeightedQuadsV4,
             "AvxVnniWeightedQuadsV4", &rng, p, s.data(), o.data());
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
  if (x86_dot::HaveFp8FmaDot()) {  // fp8 on f32 FMAs (EXACT, and FAST where !PreferBF16Dot)
    alignas(64) static float q[4 * kD];
    alignas(64) static uint8_t k[kKeys * kD];
    for (float& x : q) x = 0x1p120f * weight(rng);  // Q rows carry 2^120 (Fp8Folded)
    // Normal codes only: a subnormal code widens to a subnormal f32 (its
    // value times 2^-120), and FMAs on those take microcode assists on
    // Intel (Xeon with AMX: 697 ns a key with codes 0-119, 10.6 with
    // 0x08-0x77). The decode runs a tile with more than a few such codes
    // decoded instead (microkernels-inl.h's Fp8RowsNeedDecoding).
    std::uniform_int_distribution<int> normal_code(0x08, 0x77);
    for (uint8_t& b : k) b = static_cast<uint8_t>(normal_code(rng));
    const double qk = NsPerKey([&] {
      x86_dot::Fp8FmaQDotK4(q, kD, k, kD, kD, kKeys, /*e4m3=*/true, s.data(), nullptr, 0, nullptr,
                            0, 0);
    });
    std::printf("fp8 (FMA):    Q.K %.2f ns a key (Fp8FmaQDotK4)\n", qk);
  }
  if (x86_dot::HaveBF16Dot()) {  // bf16 K/V under FAST
    std::vector<uint16_t> q(4 * kD), k(kKeys * kD), v(kKeys * kD);
    for (auto* x : {&q, &k, &v}) {
      for (uint16_t& b : *x) b = static_cast<uint16_t>(0x3f80 + code(rng));  // bf16 in [1, 2)
    }
    std::vector<const uint16_t*> rows(kKeys + 1);
    for (size_t j = 0; j < kKeys + 1; ++j) rows[j] = v.data() + (j < kKeys ? j : kKeys - 1) * kD;
    const double qk = NsPerKey([&] {
      x86_dot::BF16QDotK4(q.data(), kD, k.data(), kD, kD, kKeys, 0.1f, s.data(), nullptr, 0,
                          nullptr, 0, 0);
    });
    const double pv = NsPerKey([&] {
      x86_dot::BF16WeightedSumV4(p.data(), kKeys, rows.data(), kD, kD, alpha, o.data(), kD);
    });
    std::printf("bf16 (BF16):  Q.K %.2f ns a key (BF16QDotK4), P.V %.2f (BF16WeightedSumV4)\n", qk,
                pv);
  } else {
    std::printf("bf16: this CPU has no AVX512_BF16\n");
  }
  return 0;
}

}  // namespace
}  // namespace attnkit

int main() { return attnkit::Main(); }

// Unit tests of the micro-kernels against simple scalar functions, for every
// compiled target (so every vector width), with odd sizes.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/highway/microkernels_test.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format on

#include "backends/highway/microkernels-inl.h"
#include "backends/highway/x86_dot.h"
#include "core/fast_compute.h"
#include "core/fp8.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// An aligned copy (the kernels use aligned loads on their workspaces).
hwy::AlignedFreeUniquePtr<float[]> Aligned(const std::vector<float>& v) {
  auto p = hwy::AllocateAligned<float>(v.size() + 1);
  std::copy(v.begin(), v.end(), p.get());
  return p;
}

// n floats, each `init`, aligned: a softmax's row state (m, l, alpha, flags).
hwy::AlignedFreeUniquePtr<float[]> Filled(size_t n, float init) {
  return Aligned(std::vector<float>(n, init));
}

void ExpectNear(double want, double got, double tol, const char* what) {
  EXPECT_NEAR(want, got, tol * (1.0 + std::abs(want))) << what;
}

template <int kKeys, int kRowVecs>
void CheckQDotK(size_t d, size_t row_blocks, size_t key_blocks) {
  const size_t N = hn::Lanes(DF());
  const size_t rows = row_blocks * kRowVecs * N, keys = key_blocks * kKeys;
  const size_t ldq = rows + N, ldk = d + 3, lds = rows + 2 * N;  // non-tight strides
  auto qt = Aligned(Random(d * ldq, 1));
  auto k = Aligned(Random(keys * ldk, 2));
  auto s = hwy::AllocateAligned<float>(keys * lds);
  QDotK<kKeys, kRowVecs>(qt.get(), ldq, k.get(), ldk, d, rows, keys, s.get(), lds);
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = 0; r < rows; ++r) {
      double want = 0;
      for (size_t c = 0; c < d; ++c) want += double(qt[c * ldq + r]) * k[j * ldk + c];
      ExpectNear(want, s[j * lds + r], 1e-5 * std::sqrt(double(d) + 1), "QDotK");
    }
  }
}

void TestQDotK() {
  for (size_t d : {1, 2, 7, 16, 33}) {
    for (size_t rb : {1, 2}) {
      for (size_t kb : {1, 3}) {
        CheckQDotK<kWideKeys, kWideRowVecs>(d, rb, kb);
      }
    }
  }
}

// K as f32, bf16 or f16 storage: the values the kernel should see.
template <typename T>
std::vector<T> Storage(const std::vector<float>& x, std::vector<float>* seen) {
  std::vector<T> out(x.size());
  seen->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same<T, float>::value) {
      out[i] = x[i];
    } else {
      const uint16_t bits =
          std::is_same<T, hwy::bfloat16_t>::value ? BF16FromF32(x[i]) : F16FromF32(x[i]);
      std::memcpy(&out[i], &bits, sizeof(bits));
    }
    (*seen)[i] = LoadAsF32(out.data(),
                           std::is_same<T, float>::value             ? DType::kF32
                           : std::is_same<T, hwy::bfloat16_t>::value ? DType::kBF16
                                                                     : DType::kF16,
                           static_cast<int64_t>(i));
  }
  return out;
}

// K read in place: unaligned start, row stride ldk > dp, any key count.
template <typename T>
void CheckQDotKRows(size_t d, size_t rows, size_t keys) {
  const size_t N = hn::Lanes(DF());
  const size_t dp = (d + N - 1) / N * N, ldk = dp + 3;
  const size_t rows_padded = (rows + 3) / 4 * 4 + 4, lds = rows_padded + 1;
  std::vector<float> q = Random(rows_padded * dp, 20), k = Random(keys * ldk + 1, 21);
  for (size_t r = 0; r < rows_padded; ++r) {
    for (size_t c = 0; c < dp; ++c) {
      if (c >= d || r >= rows) q[r * dp + c] = 0.0f;  // padding is zero
    }
  }
  std::vector<float> seen;
  const std::vector<T> ks = Storage<T>(k, &seen);
  auto qa = Aligned(q);
  std::vector<float> s(keys * lds + 1, 99.0f);
  // Ahead rows two keys on (those that exist), as direct decode passes them:
  // prefetching must not change a result (d = 64 takes the prefetching tiles).
  const size_t ahead_count = keys > 2 ? keys - 2 : 0;
  const AheadRows<T> k_ahead{ks.data() + 1 + 2 * ldk, ldk, ahead_count};
  QDotKRows(qa.get(), dp, ks.data() + 1, ldk, dp, rows, rows_padded, keys, s.data(), lds, k_ahead,
            k_ahead);
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = 0; r < rows_padded; ++r) {
      double want = 0;
      for (size_t c = 0; c < d; ++c) want += double(q[r * dp + c]) * seen[1 + j * ldk + c];
      ExpectNear(want, s[j * lds + r], 1e-5 * std::sqrt(double(d) + 1), "QDotKRows");
    }
    EXPECT_EQ(s[j * lds + rows_padded], 99.0f);  // untouched beyond rows_padded
  }
}

void TestQDotKRows() {
  for (size_t d : {1, 5, 16, 33, 64}) {
    for (size_t rows : {1, 3, 4, 7}) {
      for (size_t keys : {0, 1, 5, 6}) {
        CheckQDotKRows<float>(d, rows, keys);
        CheckQDotKRows<hwy::bfloat16_t>(d, rows, keys);
        CheckQDotKRows<hwy::float16_t>(d, rows, keys);
      }
    }
  }
}

// V read in place as bf16 and f16, from an unaligned start.
template <typename T>
void CheckWeightedSumVStorage(size_t keys, size_t dvecs) {
  const size_t N = hn::Lanes(DF());
  const size_t dp = dvecs * N, rows = kValueRows, ldp = rows, ldv = dp + 5, ldo = dp;
  auto p = Aligned(Random(keys * ldp + 1, 3));
  std::vector<float> seen;
  const std::vector<T> v = Storage<T>(Random(keys * ldv + 1, 4), &seen);
  auto alpha = Aligned(Random(rows, 5));
  const std::vector<float> o0 = Random(rows * ldo, 6);
  auto o = Aligned(o0);
  WeightedSumV(p.get(), ldp, v.data() + 1, ldv, keys, alpha.get(), rows, dp, o.get(), ldo);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < dp; ++c) {
      double want = double(alpha[r]) * o0[r * ldo + c];
      for (size_t j = 0; j < keys; ++j) want += double(p[j * ldp + r]) * seen[1 + j * ldv + c];
      ExpectNear(want, o[r * ldo + c], 1e-5 * std::sqrt(double(keys) + 1), "WeightedSumV");
    }
  }
  // Prefetching rows ahead (fewer than the keys, into L1 and L2) changes
  // no bit.
  for (bool into_l1 : {false, true}) {
    auto o_ahead = Aligned(o0);
    const AheadRows<T> ahead{v.data() + 1, ldv, keys > 0 ? keys - 1 : 0, into_l1};
    WeightedSumV(p.get(), ldp, v.data() + 1, ldv, keys, alpha.get(), rows, dp, o_ahead.get(), ldo,
                 ahead);
    for (size_t x = 0; x < rows * ldo; ++x) {
      if (o_ahead[x] != o[x]) {
        ExpectNear(o[x], o_ahead[x], 0.0, "WeightedSumV with ahead rows");
        break;
      }
    }
  }
}

void TestWeightedSumV() {
  const size_t N = hn::Lanes(DF());
  for (size_t keys : {0, 1, 5, 13}) {
    for (size_t dvecs : {1, 2, 3, 5}) {  // odd counts exercise the 1-vector tail
      const size_t dp = dvecs * N, rows = 2 * kValueRows, ldp = rows + N, ldv = dp + N;
      const size_t ldo = dp;
      auto p = Aligned(Random(keys * ldp + 1, 3));
      auto v = Aligned(Random(keys * ldv + 1, 4));
      auto alpha = Aligned(Random(rows, 5));
      const std::vector<float> o0 = Random(rows * ldo, 6);
      auto o = Aligned(o0);
      WeightedSumV(p.get(), ldp, v.get(), ldv, keys, alpha.get(), rows, dp, o.get(), ldo);
      for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < dp; ++c) {
          double want = double(alpha[r]) * o0[r * ldo + c];
          for (size_t j = 0; j < keys; ++j) want += double(p[j * ldp + r]) * v[j * ldv + c];
          ExpectNear(want, o[r * ldo + c], 1e-5 * std::sqrt(double(keys) + 1), "WeightedSumV");
        }
      }
      CheckWeightedSumVStorage<float>(keys, dvecs);
      CheckWeightedSumVStorage<hwy::bfloat16_t>(keys, dvecs);
      CheckWeightedSumVStorage<hwy::float16_t>(keys, dvecs);
    }
  }
}

// Two tiles through OnlineSoftmaxUpdate equal one softmax over both, with
// blocked (-inf) scores, rows blocked in the first tile only, and rows
// blocked everywhere.
void TestOnlineSoftmaxUpdate() {
  const size_t N = hn::Lanes(DF());
  for (size_t keys : {1, 2, 7}) {
    const size_t rows = 2 * N, lds = rows;
    std::vector<float> s0 = Random(keys * lds, 7), s1 = Random(keys * lds, 8);
    for (size_t j = 0; j < keys; ++j) {
      s0[j * lds + 0] = kNegInf;  // row 0 blocked in tile 0, visible in tile 1
      s0[j * lds + rows - 1] = s1[j * lds + rows - 1] = kNegInf;  // always blocked
      if (j % 2 == 1) s1[j * lds + 1] = kNegInf;
    }
    s0[0 * lds + 1] = 30.0f;  // large score: forces a rescale in tile 1
    auto a0 = Aligned(s0), a1 = Aligned(s1);
    auto m = hwy::AllocateAligned<float>(rows), l = hwy::AllocateAligned<float>(rows);
    auto alpha = hwy::AllocateAligned<float>(rows);
    for (size_t r = 0; r < rows; ++r) m[r] = kNegInf, l[r] = 0;
    OnlineSoftmaxUpdate(a0.get(), lds, keys, rows, m.get(), l.get(), alpha.get());
    std::vector<float> alpha0(alpha.get(), alpha.get() + rows);
    OnlineSoftmaxUpdate(a1.get(), lds, keys, rows, m.get(), l.get(), alpha.get());
    for (size_t r = 0; r < rows; ++r) {
      double mx = -INFINITY;
      for (size_t j = 0; j < keys; ++j)
        mx = std::max({mx, double(s0[j * lds + r]), double(s1[j * lds + r])});
      if (std::isinf(mx)) {
        EXPECT_EQ(l[r], 0.0f) << r;
        EXPECT_EQ(m[r], kNegInf) << r;
        for (size_t j = 0; j < keys; ++j) EXPECT_EQ(a1[j * lds + r], 0.0f);
        continue;
      }
      double sum = 0;
      for (size_t j = 0; j < keys; ++j)
        sum += std::exp(s0[j * lds + r] - mx) + std::exp(s1[j * lds + r] - mx);
      EXPECT_EQ(m[r], float(mx)) << r;
      ExpectNear(sum, l[r], 1e-6, "l");
      for (size_t j = 0; j < keys; ++j) {
        ExpectNear(std::exp(double(s1[j * lds + r]) - mx), a1[j * lds + r], 1e-6, "p");
        EXPECT_FALSE(std::isnan(a0[j * lds + r]));
      }
      EXPECT_FALSE(std::isnan(alpha0[r]));
      EXPECT_FALSE(std::isnan(alpha[r]));
    }
  }
}

void TestMaskKeyRange() {
  const size_t N = hn::Lanes(DF());
  const size_t rows = 2 * N, keys = 11, lds = rows;
  auto s = Aligned(Random(keys * lds, 9));
  const std::vector<float> orig(s.get(), s.get() + keys * lds);
  auto kb = hwy::AllocateAligned<float>(rows), ke = hwy::AllocateAligned<float>(rows);
  for (size_t r = 0; r < rows; ++r) {
    kb[r] = float(int(r % 5) - 1);
    ke[r] = float(r % 13);
  }
  MaskKeyRange(s.get(), lds, keys, rows, kb.get(), ke.get());
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = 0; r < rows; ++r) {
      const bool visible = float(j) >= kb[r] && float(j) < ke[r];
      EXPECT_EQ(s[j * lds + r], visible ? orig[j * lds + r] : kNegInf) << j << " " << r;
    }
  }
  // With flags: a NaN or Inf flags its row where the pair is visible, never
  // where it is masked; FlagNonFiniteScores flags every position.
  const float nonfinite[] = {std::numeric_limits<float>::quiet_NaN(), -kNegInf, kNegInf};
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = 0; r < rows; ++r) {
      std::copy(orig.begin(), orig.end(), s.get());
      s[j * lds + r] = nonfinite[(j + r) % 3];
      auto bad = hwy::AllocateAligned<float>(rows);
      std::fill(bad.get(), bad.get() + rows, 0.0f);
      MaskKeyRange(s.get(), lds, keys, rows, kb.get(), ke.get(), bad.get());
      const bool visible = float(j) >= kb[r] && float(j) < ke[r];
      for (size_t x = 0; x < rows; ++x) {
        EXPECT_EQ(bad[x], x == r && visible ? 1.0f : 0.0f) << j << " " << r << " " << x;
      }
      std::copy(orig.begin(), orig.end(), s.get());
      s[j * lds + r] = nonfinite[(j + r) % 3];
      std::fill(bad.get(), bad.get() + rows, 0.0f);
      FlagNonFiniteScores(s.get(), lds, keys, rows, bad.get());
      for (size_t x = 0; x < rows; ++x) EXPECT_EQ(bad[x], x == r ? 1.0f : 0.0f);
      // The softmax's max pass flags the same (every key count's tail).
      for (size_t nkeys : {keys, j + 1}) {
        std::copy(orig.begin(), orig.end(), s.get());
        s[j * lds + r] = nonfinite[(j + r) % 3];
        std::fill(bad.get(), bad.get() + rows, 0.0f);
        auto m = hwy::AllocateAligned<float>(rows), l = hwy::AllocateAligned<float>(rows);
        auto alpha = hwy::AllocateAligned<float>(rows);
        std::fill(m.get(), m.get() + rows, kNegInf);
        std::fill(l.get(), l.get() + rows, 0.0f);
        OnlineSoftmaxUpdate(s.get(), lds, nkeys, rows, m.get(), l.get(), alpha.get(), bad.get());
        for (size_t x = 0; x < rows; ++x) EXPECT_EQ(bad[x], x == r ? 1.0f : 0.0f) << nkeys;
      }
    }
  }
  // AllFinite over f32 and bf16 storage (BF16Pairs: TestBF16Pairs).
  std::vector<float> row(4 * N, 0.5f);
  std::vector<uint16_t> row16(4 * N, BF16FromF32(0.5f));
  const auto* as_bf16 = reinterpret_cast<const hwy::bfloat16_t*>(row16.data());
  EXPECT_TRUE(AllFinite(row.data(), 4 * N));
  EXPECT_TRUE(AllFinite(as_bf16, 4 * N));
  for (size_t c = 0; c < 4 * N; ++c) {
    row[c] = nonfinite[c % 3];
    row16[c] = BF16FromF32(nonfinite[c % 3]);
    EXPECT_FALSE(AllFinite(row.data(), 4 * N)) << c;
    EXPECT_FALSE(AllFinite(as_bf16, 4 * N)) << c;
    row[c] = 0.5f;
    row16[c] = BF16FromF32(0.5f);
  }
}

void TestSoftCapAndLoadRow() {
  const size_t N = hn::Lanes(DF());
  const std::vector<float> x0 = Random(3 * N, 10);
  auto x = Aligned(x0);
  for (size_t i = 0; i < 3 * N; ++i) x[i] *= 20.0f;
  x[1] = kNegInf;  // a blocked pair stays blocked
  SoftCap(x.get(), 3 * N, 5.0f);
  for (size_t i = 0; i < 3 * N; ++i) {
    if (i == 1) {
      EXPECT_EQ(x[i], kNegInf);
      continue;
    }
    ExpectNear(5.0 * std::tanh(20.0 * x0[i] / 5.0), x[i], 1e-5, "SoftCap");
  }
  for (size_t n : {0, 1, 3, 17, 40}) {
    const std::vector<float> src = Random(2 * n + 1, 11);
    std::vector<uint16_t> bf(2 * n + 1), h(2 * n + 1);
    for (size_t i = 0; i < src.size(); ++i) {
      bf[i] = BF16FromF32(src[i]);
      h[i] = F16FromF32(src[i]);
    }
    const size_t np = n + 5;
    std::vector<float> dst(np, 7.0f);
    for (int64_t stride : {1, 2}) {
      LoadRowAsF32(src.data(), DType::kF32, stride, n, np, dst.data());
      for (size_t i = 0; i < np; ++i) EXPECT_EQ(dst[i], i < n ? src[i * stride] : 0.0f);
      LoadRowAsF32(bf.data(), DType::kBF16, stride, n, np, dst.data());
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(dst[i], F32FromBF16(bf[i * stride]));
      LoadRowAsF32(h.data(), DType::kF16, stride, n, np, dst.data());
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(dst[i], F32FromF16(h[i * stride]));
    }
  }
}

// QuantizeQueryRowInt8 gives core's QuantizeQueryRow's bits: the values,
// the scale and their sum, on ties (k / 4 against an inverse scale of 1,
// and the floats either side of x.5), rows of zeros, rows holding a NaN
// or an Inf; and it leaves rows whose inverse scale overflows to core.
void TestQuantizeQueryRowInt8() {
  const size_t N = hn::Lanes(DF());
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> ties;  // against max 127 (inverse scale 1)
  for (int k = -508; k <= 508; ++k) ties.push_back(static_cast<float>(k) / 4.0f);
  for (float x : {0.5f, 1.5f, 2.5f, 126.5f, -0.5f, -3.5f, -126.5f}) {
    ties.push_back(std::nextafter(x, 0.0f));
    ties.push_back(std::nextafter(x, 2 * x));
  }
  for (size_t n : {N, 2 * N, 8 * N, std::max(N, size_t{128} / N * N)}) {
    for (int kind = 0; kind < 9; ++kind) {
      std::vector<float> row(n);
      for (float& x : row) x = normal(rng) * (kind == 1 ? 1e-30f : kind == 2 ? 3e30f : 1.0f);
      if (kind == 3) {  // the ties, n at a time, with -127 last
        for (size_t at = 0; at < ties.size(); at += n) {
          for (size_t c = 0; c < n; ++c) row[c] = ties[(at + c) % ties.size()];
          row[n - 1] = -127.0f;
          std::vector<int8_t> want(n), got(n);
          const float want_scale =
              QuantizeQueryRow(row.data(), static_cast<int64_t>(n), want.data());
          float got_scale = 0.0f;
          int32_t sum = 0;
          ASSERT_TRUE(QuantizeQueryRowInt8(row.data(), n, got.data(), &got_scale, &sum));
          EXPECT_EQ(want_scale, got_scale);
          ASSERT_EQ(want, got) << "ties from " << at;
        }
        continue;
      }
      if (kind == 4) std::fill(row.begin(), row.end(), 0.0f);
      if (kind == 4 && n > 1) row[1] = -0.0f;
      if (kind == 5) row[n / 2] = kNaN;
      if (kind == 6) row[n - 1] = -kInf;
      if (kind == 7) row[0] = kInf;
      if (kind == 8) {  // 127 / max|q| overflows: left to core
        for (float& x : row) x = (x < 0 ? -1e-38f : 1e-38f) * (1.0f + std::fabs(x));
        if (n > 1) row[n - 1] = 0.0f;
        std::vector<int8_t> out(n, 99);
        float scale = 5.0f;
        int32_t sum = 5;
        EXPECT_FALSE(QuantizeQueryRowInt8(row.data(), n, out.data(), &scale, &sum));
        EXPECT_EQ(out, std::vector<int8_t>(n, 99));
        EXPECT_EQ(scale, 5.0f);
        EXPECT_EQ(sum, 5);
        continue;
      }
      std::vector<int8_t> want(n, 99), got(n, 99);
      const float want_scale = QuantizeQueryRow(row.data(), static_cast<int64_t>(n), want.data());
      float got_scale = 0.0f;
      int32_t sum = 12345;
      ASSERT_TRUE(QuantizeQueryRowInt8(row.data(), n, got.data(), &got_scale, &sum));
      int32_t want_sum = 0;
      for (int8_t v : want) want_sum += v;
      if (std::isnan(want_scale)) {
        EXPECT_TRUE(std::isnan(got_scale)) << "n " << n << " kind " << kind;
      } else {
        EXPECT_EQ(want_scale, got_scale) << "n " << n << " kind " << kind;
      }
      EXPECT_EQ(want, got) << "n " << n << " kind " << kind;
      EXPECT_EQ(want_sum, sum) << "n " << n << " kind " << kind;
    }
  }
}

// Merging partials over split key ranges equals the softmax over all keys.
void TestMergeLsePartials() {
  const size_t N = hn::Lanes(DF());
  for (size_t dvecs : {1, 3}) {
    const size_t dp = dvecs * N;
    for (size_t parts : {1, 2, 5}) {
      const size_t keys_per = 4, keys = parts * keys_per;
      const std::vector<float> score = Random(keys, 12), v = Random(keys * dp, 13);
      std::vector<float> lses(parts);
      auto o = hwy::AllocateAligned<float>(parts * dp);
      for (size_t s = 0; s < parts; ++s) {
        // Part 1 (if any) sees nothing: lse -inf, garbage-free zeros.
        if (s == 1) {
          lses[s] = kNegInf;
          for (size_t c = 0; c < dp; ++c) o[s * dp + c] = 0;
          continue;
        }
        double sum = 0;
        for (size_t j = s * keys_per; j < (s + 1) * keys_per; ++j)
          sum += std::exp(double(score[j]));
        lses[s] = float(std::log(sum));
        for (size_t c = 0; c < dp; ++c) {
          double acc = 0;
          for (size_t j = s * keys_per; j < (s + 1) * keys_per; ++j)
            acc += std::exp(double(score[j])) * v[j * dp + c];
          o[s * dp + c] = float(acc / sum);
        }
      }
      auto out = hwy::AllocateAligned<float>(dp);
      const float lse = MergeLsePartials(o.get(), dp, lses.data(), parts, dp, out.get());
      double sum = 0;
      for (size_t j = 0; j < keys; ++j)
        if (j / keys_per != 1) sum += std::exp(double(score[j]));
      ExpectNear(std::log(sum), lse, 1e-6, "lse");
      for (size_t c = 0; c < dp; ++c) {
        double acc = 0;
        for (size_t j = 0; j < keys; ++j)
          if (j / keys_per != 1) acc += std::exp(double(score[j])) * v[j * dp + c];
        ExpectNear(acc / sum, out[c], 1e-5, "merged o");
      }
    }
    // Everything blocked: zeros and -inf.
    const float lses[2] = {kNegInf, kNegInf};
    auto o = hwy::AllocateAligned<float>(2 * dp);
    for (size_t i = 0; i < 2 * dp; ++i) o[i] = 0;
    auto out = hwy::AllocateAligned<float>(dp);
    EXPECT_EQ(MergeLsePartials(o.get(), dp, lses, 2, dp, out.get()), kNegInf);
    for (size_t c = 0; c < dp; ++c) EXPECT_EQ(out[c], 0.0f);
    // One part read a NaN or Inf (lse NaN): the merged row is NaN.
    const float poisoned[3] = {0.5f, std::numeric_limits<float>::quiet_NaN(), kNegInf};
    auto o3 = hwy::AllocateAligned<float>(3 * dp);
    for (size_t i = 0; i < 3 * dp; ++i) o3[i] = 0.25f;
    EXPECT_TRUE(std::isnan(MergeLsePartials(o3.get(), dp, poisoned, 3, dp, out.get())));
    for (size_t c = 0; c < dp; ++c) EXPECT_TRUE(std::isnan(out[c])) << c;
  }
}

// BF16Pairs (bf16 rows read two vectors at a time, columns permuted) against
// plain bf16 reads: QDotKRows with Q stored in the pair order gives the same
// scores, and WeightedSumV the same output in the pair order. Unaligned,
// strided storage; with and without prefetching ahead rows. AllFinite over
// pairs flags every NaN or Inf position.
void TestBF16Pairs() {
  if (!kHaveBF16Pairs) {
    GTEST_SKIP() << "no BF16Pairs on " << hwy::TargetName(HWY_TARGET)
                 << ": one lane per vector, so the kernels read bf16 one value at a time here "
                    "(TestQDotKRows and TestWeightedSumV cover that)";
  }
  const size_t N = hn::Lanes(DF()), chunk = 2 * N;
  const float nonfinite[] = {std::numeric_limits<float>::quiet_NaN(), -kNegInf, kNegInf};
  std::vector<uint16_t> row16(4 * N, BF16FromF32(0.5f));
  const auto* as_pairs = reinterpret_cast<const BF16Pairs*>(row16.data());
  EXPECT_TRUE(AllFinite(as_pairs, 4 * N));
  for (size_t c = 0; c < 4 * N; ++c) {
    row16[c] = BF16FromF32(nonfinite[c % 3]);
    EXPECT_FALSE(AllFinite(as_pairs, 4 * N)) << c;
    row16[c] = BF16FromF32(0.5f);
  }
  std::vector<uint32_t> perm(chunk);
  BF16PairColumns(perm.data());
  std::vector<bool> hit(chunk, false);  // a permutation of [0, chunk)
  for (uint32_t c : perm) {
    ASSERT_LT(c, chunk);
    hit[c] = true;
  }
  for (bool h : hit) EXPECT_TRUE(h);
  for (size_t dp : {chunk, 2 * chunk, 64 / chunk * chunk + chunk}) {
    const size_t rows = 4, rows_padded = 8, keys = 7, ldk = dp + 3, lds = rows_padded;
    std::vector<float> seen;
    const std::vector<hwy::bfloat16_t> k =
        Storage<hwy::bfloat16_t>(Random(keys * ldk + 1, 30), &seen);
    const auto* kp = reinterpret_cast<const BF16Pairs*>(k.data() + 1);
    std::vector<float> q = Random(rows_padded * dp, 31), qperm(q.size());
    for (size_t r = 0; r < rows_padded; ++r) {
      for (size_t c = 0; c < dp; ++c) {
        if (r >= rows) q[r * dp + c] = 0.0f;
      }
      for (size_t c = 0; c < dp; ++c)
        qperm[r * dp + c] = q[r * dp + c - c % chunk + perm[c % chunk]];
    }
    auto qa = Aligned(q), qpa = Aligned(qperm);
    std::vector<float> s_plain(keys * lds), s_pairs(keys * lds);
    QDotKRows(qa.get(), dp, k.data() + 1, ldk, dp, rows, rows_padded, keys, s_plain.data(), lds);
    for (size_t ahead : {0, 2}) {
      const AheadRows<BF16Pairs> rows_ahead{kp + ahead * ldk, ldk, ahead == 0 ? 0 : keys - ahead};
      QDotKRows(qpa.get(), dp, kp, ldk, dp, rows, rows_padded, keys, s_pairs.data(), lds,
                rows_ahead, rows_ahead);
      for (size_t i = 0; i < s_plain.size(); ++i) {
        ExpectNear(s_plain[i], s_pairs[i], 1e-5 * std::sqrt(double(dp)), "BF16Pairs QDotKRows");
      }
    }
    // Values: the same storage as V, output compared position by position.
    const size_t ldp = rows, ldo = dp;
    auto p = Aligned(Random(keys * ldp, 32));
    auto alpha = Aligned(Random(rows, 33));
    const std::vector<float> o0 = Random(rows * ldo, 34);
    std::vector<float> o0perm(o0.size());
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < dp; ++c)
        o0perm[r * ldo + c] = o0[r * ldo + c - c % chunk + perm[c % chunk]];
    }
    auto o_plain = Aligned(o0), o_pairs = Aligned(o0perm);
    WeightedSumV(p.get(), ldp, k.data() + 1, ldk, keys, alpha.get(), rows, dp, o_plain.get(), ldo);
    WeightedSumV(p.get(), ldp, kp, ldk, keys, alpha.get(), rows, dp, o_pairs.get(), ldo);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < dp; ++c) {
        ExpectNear(o_plain[r * ldo + c - c % chunk + perm[c % chunk]], o_pairs[r * ldo + c], 1e-5,
                   "BF16Pairs WeightedSumV");
      }
    }
  }
}

// ExpNonPositive on every target: full relative accuracy down to -87, exactly
// 0 below it and for -inf and NaN (blocked or poisoned scores), 1 at 0.
void TestExpNonPositive() {
  const DF df;
  const size_t N = hn::Lanes(df);
  std::vector<float> x;
  for (float v = 0.0f; v > -130.0f; v -= 0.0371f) x.push_back(v);
  x.push_back(-0.0f);
  x.push_back(kNegInf);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  while (x.size() % N != 0) x.push_back(-1.0f);
  auto in = hwy::AllocateAligned<float>(x.size());
  auto out = hwy::AllocateAligned<float>(x.size());
  for (size_t i = 0; i < x.size(); ++i) in[i] = x[i];
  for (size_t i = 0; i < x.size(); i += N) {
    hn::Store(ExpNonPositive(df, hn::Load(df, in.get() + i)), df, out.get() + i);
  }
  // Interleaved over 4 and 3 vectors: the same bits as one at a time.
  for (size_t i = 0; i + 4 * N <= x.size(); i += 4 * N) {
    VF v4[4], v3[3];
    for (size_t k = 0; k < 4; ++k) v4[k] = hn::Load(df, in.get() + i + k * N);
    for (size_t k = 0; k < 3; ++k) v3[k] = hn::Load(df, in.get() + i + k * N);
    ExpNonPositiveN<4>(df, v4);
    ExpNonPositiveN<3>(df, v3);
    for (size_t k = 0; k < 4; ++k) {
      auto lanes = hwy::AllocateAligned<float>(N);
      hn::Store(v4[k], df, lanes.get());
      EXPECT_EQ(0, std::memcmp(lanes.get(), out.get() + i + k * N, N * sizeof(float))) << i;
      if (k == 3) continue;
      hn::Store(v3[k], df, lanes.get());
      EXPECT_EQ(0, std::memcmp(lanes.get(), out.get() + i + k * N, N * sizeof(float))) << i;
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] >= -87.0f)) {  // below range, -inf, NaN
      EXPECT_EQ(out[i], 0.0f) << x[i];
    } else {
      const double want = std::exp(double(x[i]));
      EXPECT_NEAR(out[i], want, 3e-7 * want) << x[i];
    }
  }
}

// OnlineSoftmaxUpdateToBF16Pairs (AVX3_DL on a CPU with AVX512_BF16) gives
// the m, l, alpha and flags OnlineSoftmaxUpdate gives, and the pairs
// x86_dot::BF16PackWeights makes of its P, bit for bit: odd key counts,
// blocked scores, rows blocked throughout and a NaN flagged in the max pass.
void TestSoftmaxToBF16Pairs() {
#if HWY_TARGET == HWY_AVX3_DL && defined(__x86_64__) && defined(__GNUC__)
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const size_t N = hn::Lanes(DF());
  const size_t rows = 2 * N, lds = rows;
  for (size_t keys : {1, 2, 5, 8, 63, 64}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool flag = variant == 1;  // a NaN flagged in the max pass
      const bool ends = variant == 2;  // key ends: a causal-like diagonal
      std::vector<float> s0 = Random(keys * lds, 11 + keys);
      for (size_t j = 0; j < keys; ++j) {
        s0[j * lds + rows - 1] = kNegInf;  // blocked throughout
        if (j % 3 == 1) s0[j * lds + 2] = kNegInf;
        s0[j * lds + 3] *= 40.0f;  // exps far below 1
      }
      if (flag) s0[(keys - 1) * lds + 5] = std::numeric_limits<float>::quiet_NaN();
      // Row r sees keys [0, ke[r]) (the first vector of rows fewer than
      // the second), its scores past them -inf, as MaskKeyRange leaves them.
      auto ke = hwy::AllocateAligned<float>(rows);
      for (size_t r = 0; r < rows; ++r) {
        ke[r] =
            static_cast<float>(std::min(keys, (r * keys) / (2 * rows) + (r >= N ? keys / 2 : 0)));
        if (r == 1) ke[r] = 0.0f;  // none at all
        for (size_t j = 0; ends && j < keys; ++j) {
          if (static_cast<float>(j) >= ke[r]) s0[j * lds + r] = kNegInf;
        }
      }
      auto plain = Aligned(s0), fused = Aligned(s0);
      auto m0 = Filled(rows, kNegInf), l0 = Filled(rows, 0.0f), a0 = Filled(rows, 0.0f);
      auto bad0 = Filled(rows, 0.0f);
      auto m1 = Filled(rows, kNegInf), l1 = Filled(rows, 0.0f), a1 = Filled(rows, 0.0f);
      auto bad1 = Filled(rows, 0.0f);
      m0[4] = m1[4] = 0.25f;  // a row seen before: alpha < 1
      l0[4] = l1[4] = 3.0f;
      const size_t pairs = (keys + 1) / 2;
      std::vector<uint32_t> pp0(pairs * rows), pp1(pairs * rows, 0xdeadbeef);
      OnlineSoftmaxUpdate(plain.get(), lds, keys, rows, m0.get(), l0.get(), a0.get(),
                          flag ? bad0.get() : nullptr);
      x86_dot::BF16PackWeights(plain.get(), lds, keys, rows, pp0.data(), rows);
      OnlineSoftmaxUpdateToBF16Pairs(fused.get(), lds, keys, rows, m1.get(), l1.get(), a1.get(),
                                     flag ? bad1.get() : nullptr, ends ? ke.get() : nullptr,
                                     pp1.data(), rows);
      if (ends) {  // the pairs past a vector's last visible key are not written: match them
        for (size_t r0 = 0; r0 < rows; r0 += N) {
          float end = 0.0f;
          for (size_t r = r0; r < r0 + N; ++r) end = std::max(end, ke[r]);
          for (size_t jp = (static_cast<size_t>(end) + 1) / 2; jp < pairs; ++jp) {
            for (size_t r = r0; r < r0 + N; ++r) {
              EXPECT_EQ(pp1[jp * rows + r], 0xdeadbeef) << keys << " pair " << jp;
              pp1[jp * rows + r] = pp0[jp * rows + r];
            }
          }
        }
      }
      const size_t bytes = rows * sizeof(float);
      EXPECT_EQ(0, std::memcmp(m0.get(), m1.get(), bytes)) << keys;
      EXPECT_EQ(0, std::memcmp(l0.get(), l1.get(), bytes)) << keys;
      EXPECT_EQ(0, std::memcmp(a0.get(), a1.get(), bytes)) << keys;
      EXPECT_EQ(0, std::memcmp(bad0.get(), bad1.get(), bytes)) << keys;
      EXPECT_EQ(pp0, pp1) << keys << " " << variant;
      EXPECT_EQ(0, std::memcmp(fused.get(), s0.data(), keys * lds * sizeof(float)));  // S as was
    }
  }
#endif
}

// A score scale applied in the softmax (score_scale: S holds unscaled
// scores, as AMX Q.K leaves them) gives, bit for bit, what the softmax
// gives on S scaled beforehand in f32 (m, l, alpha, flags and P, and on
// AVX3_DL with AVX512_BF16 the bf16 pairs): blocked scores, a NaN flagged
// in the max pass, large scores, two tiles (a rescale), scale 1/sqrt(128).
void TestSoftmaxScoreScale() {
  const size_t N = hn::Lanes(DF());
  const size_t rows = std::max<size_t>(2 * N, 8), lds = rows;  // rows 3 and 5 below
  const float scale = 1.0f / std::sqrt(128.0f);
  for (size_t keys : {1, 2, 5, 64}) {
    for (const bool flag : {false, true}) {
      auto m0 = Filled(rows, kNegInf), l0 = Filled(rows, 0.0f), a0 = Filled(rows, 0.0f);
      auto bad0 = Filled(rows, 0.0f);
      auto m1 = Filled(rows, kNegInf), l1 = Filled(rows, 0.0f), a1 = Filled(rows, 0.0f);
      auto bad1 = Filled(rows, 0.0f);
      for (int tile = 0; tile < 2; ++tile) {
        std::vector<float> raw = Random(keys * lds, 31 + keys + tile);
        for (size_t j = 0; j < keys; ++j) {
          raw[j * lds + rows - 1] = kNegInf;                          // blocked throughout
          raw[j * lds + 3] *= 300.0f * static_cast<float>(tile + 1);  // a rescale in tile 1
        }
        if (flag) raw[(keys - 1) * lds + 5] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> scaled = raw;
        for (float& x : scaled) x *= scale;
        auto before = Aligned(scaled), deferred = Aligned(raw);
        OnlineSoftmaxUpdate(before.get(), lds, keys, rows, m0.get(), l0.get(), a0.get(),
                            flag ? bad0.get() : nullptr);
        OnlineSoftmaxUpdate(deferred.get(), lds, keys, rows, m1.get(), l1.get(), a1.get(),
                            flag ? bad1.get() : nullptr, scale);
        const size_t bytes = rows * sizeof(float);
        EXPECT_EQ(0, std::memcmp(m0.get(), m1.get(), bytes)) << keys;
        EXPECT_EQ(0, std::memcmp(l0.get(), l1.get(), bytes)) << keys;
        EXPECT_EQ(0, std::memcmp(a0.get(), a1.get(), bytes)) << keys;
        EXPECT_EQ(0, std::memcmp(bad0.get(), bad1.get(), bytes)) << keys;
        EXPECT_EQ(0, std::memcmp(before.get(), deferred.get(), keys * lds * sizeof(float)))
            << keys << " P";
#if HWY_TARGET == HWY_AVX3_DL && defined(__x86_64__) && defined(__GNUC__)
        if (!x86_dot::HaveBF16Dot()) continue;
        auto m2 = Filled(rows, kNegInf), l2 = Filled(rows, 0.0f), a2 = Filled(rows, 0.0f);
        auto bad2 = Filled(rows, 0.0f);
        auto m3 = Filled(rows, kNegInf), l3 = Filled(rows, 0.0f), a3 = Filled(rows, 0.0f);
        auto bad3 = Filled(rows, 0.0f);
        const size_t pairs = (keys + 1) / 2;
        std::vector<uint32_t> pp0(pairs * rows), pp1(pairs * rows);
        auto s2 = Aligned(scaled), s3 = Aligned(raw);
        OnlineSoftmaxUpdateToBF16Pairs(s2.get(), lds, keys, rows, m2.get(), l2.get(), a2.get(),
                                       flag ? bad2.get() : nullptr, nullptr, pp0.data(), rows);
        OnlineSoftmaxUpdateToBF16Pairs(s3.get(), lds, keys, rows, m3.get(), l3.get(), a3.get(),
                                       flag ? bad3.get() : nullptr, nullptr, pp1.data(), rows,
                                       scale);
        EXPECT_EQ(0, std::memcmp(m2.get(), m3.get(), bytes)) << keys;
        EXPECT_EQ(0, std::memcmp(l2.get(), l3.get(), bytes)) << keys;
        EXPECT_EQ(pp0, pp1) << keys;
#endif
      }
    }
  }
}

// Fp8RowsNeedDecoding on rows of normal codes (each format, back to back
// and strided, with and without a tail past the whole vectors, as one run
// and split in two): a special code anywhere (every special code, in the
// vectors and in the tail) makes it true; zeros never do; subnormal codes
// do once there are more than kFp8SubnormalCodesFolded of them, wherever
// they are (the same column of several rows, the tail), with zeros about,
// on the targets that count them (kFp8CountsSubnormal: x86 from AVX2 up);
// no byte outside the rows' d codes is read (they hold special codes).
template <bool kE4M3>
void CheckFp8RowsNeedDecoding() {
  constexpr size_t kLimit = kFp8SubnormalCodesFolded;
  constexpr uint8_t kExponent = kE4M3 ? 0x78 : 0x7C;
  constexpr uint8_t kMantissa = kE4M3 ? 0x07 : 0x03;
  for (size_t d : {size_t{128}, size_t{100}, size_t{7}}) {
    for (size_t ld : {d, d + 5}) {
      for (size_t n : {size_t{1}, size_t{3}, size_t{16}}) {
        SCOPED_TRACE(testing::Message()
                     << (kE4M3 ? "E4M3" : "E5M2") << " d=" << d << " ld=" << ld << " rows=" << n);
        std::mt19937_64 rng(d * 131 + ld * 7 + n);
        std::vector<uint8_t> rows(n * ld + 64);
        // Normal codes only: an exponent field from 1 to its largest
        // finite (E4M3's top one with a mantissa below 7).
        auto normal = [&] {
          for (;;) {
            const uint8_t code = static_cast<uint8_t>(rng());
            const uint8_t e = code & kExponent;
            if (e != 0 && (kE4M3 ? (code & 0x7F) != 0x7F : e != kExponent)) return code;
          }
        };
        // Normal codes in the rows' d columns; a NaN (E4M3) or Inf (E5M2)
        // code in the gaps between rows and past the last one, which the
        // check must not read.
        const uint8_t outside = kE4M3 ? 0xFF : 0x7C;
        auto fill = [&] {
          for (size_t i = 0; i < rows.size(); ++i) {
            rows[i] = i < n * ld && i % ld < d ? normal() : outside;
          }
        };
        auto at = [&](size_t row, size_t col) -> uint8_t& { return rows[row * ld + col]; };
        // The answer for the rows as one run, checked equal with the rows
        // split in two runs (a page boundary after the first row; the
        // second run's rows copied elsewhere, the bytes around them
        // special).
        std::vector<uint8_t> second(n * ld + 64 + ld);
        auto one_and_split = [&](const auto& check) {
          const uint8_t* one[1] = {rows.data()};
          const int64_t one_begin[2] = {0, static_cast<int64_t>(n)};
          const bool whole = check(one, one_begin, 1);
          if (n > 1) {
            std::fill(second.begin(), second.end(), outside);
            uint8_t* const copy = second.data() + ld;  // a row's worth of special bytes before
            for (size_t row = 1; row < n; ++row) {
              std::copy_n(rows.data() + row * ld, d, copy + (row - 1) * ld);
            }
            const uint8_t* two[2] = {rows.data(), copy};
            const int64_t two_begin[3] = {0, 1, static_cast<int64_t>(n)};
            EXPECT_EQ(check(two, two_begin, 2), whole) << "split";
          }
          return whole;
        };
        auto need = [&] {
          return one_and_split([&](const uint8_t* const* r, const int64_t* begin, int count) {
            return Fp8RowsNeedDecoding<kE4M3>(r, begin, count, ld, d);
          });
        };
        // Fp8RowsHaveSpecial: the specials alone, whatever the subnormal codes.
        auto has_special = [&] {
          return one_and_split([&](const uint8_t* const* r, const int64_t* begin, int count) {
            return Fp8RowsHaveSpecial<kE4M3>(r, begin, count, ld, d);
          });
        };
        fill();
        EXPECT_FALSE(need());
        EXPECT_FALSE(has_special());
        // Every special code, at the first, a middle and the last place.
        for (int code = 0; code < 256; ++code) {
          const bool special = kE4M3 ? (code & 0x7F) == 0x7F : (code & kExponent) == kExponent;
          if (!special) continue;
          for (const auto& [row, col] :
               {std::pair<size_t, size_t>{0, 0}, {n / 2, d / 2}, {n - 1, d - 1}}) {
            fill();
            at(row, col) = static_cast<uint8_t>(code);
            EXPECT_TRUE(need()) << code << " at " << row << "," << col;
            EXPECT_TRUE(has_special()) << code << " at " << row << "," << col;
          }
        }
        // Zeros (both signs) everywhere.
        for (size_t row = 0; row < n; ++row) {
          for (size_t col = 0; col < d; ++col) at(row, col) = col % 2 ? 0x80 : 0x00;
        }
        EXPECT_FALSE(need());
        // kLimit (+1) subnormal codes, both signs, with zeros in the rest of
        // the first row: in the first columns of the last row, in one column
        // (rows permitting), and in the last columns of the first row (the
        // tail where d is not whole vectors).
        for (size_t count : {kLimit, kLimit + 1}) {
          auto subnormal = [&](size_t i) {
            return static_cast<uint8_t>((i % 2 ? 0x80 : 0) | (1 + i % kMantissa));
          };
          auto zeros = [&] {
            fill();
            for (size_t col = 0; col < d; ++col) at(0, col) = 0x00;
          };
          if (count <= d) {
            zeros();
            for (size_t i = 0; i < count; ++i) at(n - 1, i) = subnormal(i);
            EXPECT_EQ(need(), kFp8CountsSubnormal && count > kLimit) << count << " in a row";
            EXPECT_FALSE(has_special()) << count << " in a row";
            zeros();
            for (size_t i = 0; i < count; ++i) at(0, d - 1 - i) = subnormal(i);
            EXPECT_EQ(need(), kFp8CountsSubnormal && count > kLimit)
                << count << " at the end of a row";
          }
          if (count <= n) {
            fill();
            for (size_t i = 0; i < count; ++i) at(i, d / 3) = subnormal(i);
            EXPECT_EQ(need(), kFp8CountsSubnormal && count > kLimit) << count << " in a column";
          }
        }
      }
    }
  }
}

void TestFp8RowsNeedDecoding() {
  CheckFp8RowsNeedDecoding<true>();
  CheckFp8RowsNeedDecoding<false>();
}

// Fp8HalfFolded's read: every E4M3 code but the two NaN ones (which its
// tiles never hold) is its value times 2^-8, exactly, subnormal codes
// included, on every target.
void TestFp8HalfFoldedLoad() {
  const DF df;
  const size_t N = hn::Lanes(df);
  std::vector<uint8_t> codes(256 + N);  // code c at c
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  auto out = hwy::AllocateAligned<float>(N);
  for (size_t c0 = 0; c0 < 256; c0 += N) {
    hn::Store(LoadF32(df, reinterpret_cast<const Fp8HalfFolded*>(codes.data() + c0)), df,
              out.get());
    for (size_t i = 0; i < N && c0 + i < 256; ++i) {
      const uint8_t code = static_cast<uint8_t>(c0 + i);
      if ((code & 0x7F) == 0x7F) continue;
      const float want = std::ldexp(Fp8CodeValue(code, /*e4m3=*/true), -8);
      EXPECT_EQ(out[i], want) << "code " << int{code};
      EXPECT_EQ(std::signbit(out[i]), std::signbit(want)) << "code " << int{code};
    }
  }
}

}  // namespace
// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
namespace HWY_NAMESPACE {}
HWY_BEFORE_TEST(MicroKernelTest);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestQDotK);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestQDotKRows);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestWeightedSumV);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestOnlineSoftmaxUpdate);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestMaskKeyRange);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestSoftCapAndLoadRow);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestMergeLsePartials);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestExpNonPositive);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestBF16Pairs);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestSoftmaxToBF16Pairs);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestSoftmaxScoreScale);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestFp8RowsNeedDecoding);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestFp8HalfFoldedLoad);
HWY_EXPORT_AND_TEST_P(MicroKernelTest, TestQuantizeQueryRowInt8);
}  // namespace attnkit
#endif

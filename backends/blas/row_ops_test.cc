// The dispatched row kernels against scalar loops, for lengths 0 to a few
// vectors and misaligned starts, under every compiled Highway target this CPU
// supports (dispatch follows SetSupportedTargetsForTest(GetParam())).
#include "backends/blas/row_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fast_compute.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"

namespace attnkit {
namespace blas {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> RandomRow(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  std::vector<float> x(static_cast<size_t>(n) + 8);
  for (float& v : x) v = dist(rng);
  return x;
}

class RowOpsTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(RowOpsTest);

TEST_P(RowOpsTest, DispatchesToTheTargetUnderTest) {
  EXPECT_STREQ(RowOpsTarget(), hwy::TargetName(GetParam()));
}

TEST_P(RowOpsTest, MatchesScalarForEveryLengthAndOffset) {
  SCOPED_TRACE(RowOpsTarget());
  for (int64_t n = 0; n <= 70; ++n) {
    for (int64_t off = 0; off < 4; ++off) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << off);
      std::vector<float> x = RandomRow(n, static_cast<uint32_t>(n * 4 + off));
      if (n > 2) x[off + 1] = kNegInf;  // a blocked key
      float* row = x.data() + off;
      const std::vector<float> orig = x;

      float want_max = kNegInf;
      for (int64_t j = 0; j < n; ++j) want_max = std::max(want_max, row[j]);
      EXPECT_EQ(RowMax(row, n), want_max);
      if (n == 0) continue;

      const float sum = ExpSubtractSum(row, n, want_max);
      double want_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double want = std::exp(double(orig[off + j]) - want_max);
        want_sum += want;
        EXPECT_NEAR(row[j], want, 3e-6 * want + 1e-30) << j;  // ExpNonPositive: ~1e-7
        if (orig[off + j] == kNegInf) {
          EXPECT_EQ(row[j], 0.0f);
        }
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
      // Nothing outside [off, off + n) is touched.
      for (int64_t j = 0; j < off; ++j) EXPECT_EQ(x[j], orig[j]);
      for (size_t j = off + n; j < x.size(); ++j) EXPECT_EQ(x[j], orig[j]);

      x = orig;
      ScaleRow(row, n, 0.25f);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(row[j], orig[off + j] * 0.25f);

      x = orig;
      SoftcapRow(row, n, 5.0f);
      for (int64_t j = 0; j < n; ++j) {
        if (orig[off + j] == kNegInf) {  // a blocked pair stays blocked
          EXPECT_EQ(row[j], kNegInf) << j;
          continue;
        }
        const double want = 5.0 * std::tanh(double(orig[off + j]) / 5.0);
        EXPECT_NEAR(row[j], want, 1e-6 * 5.0) << j;
      }
      for (size_t j = off + n; j < x.size(); ++j) EXPECT_EQ(x[j], orig[j]);

      // AllFinite sees one NaN or Inf at any position, and only inside the row.
      x = orig;
      for (int64_t j = 0; j < n; ++j) row[j] = 0.5f;
      EXPECT_TRUE(AllFinite(row, n));
      const float bad[] = {std::numeric_limits<float>::quiet_NaN(), -kNegInf, kNegInf};
      for (int64_t j = 0; j < n; ++j) {
        row[j] = bad[j % 3];
        EXPECT_FALSE(AllFinite(row, n)) << j;
        row[j] = 0.5f;
      }
      if (off > 0) x[off - 1] = bad[0];
      x[off + n] = bad[0];
      EXPECT_TRUE(AllFinite(row, n));
    }
  }
}

// Scores far below the max: exp underflows to (about) 0, never to garbage,
// and the ones near the max keep full relative accuracy.
TEST_P(RowOpsTest, FarBelowTheMaxGivesZero) {
  std::vector<float> x;
  for (float v = 0.0f; v > -130.0f; v -= 0.37f) x.push_back(v);
  const std::vector<float> orig = x;
  const float sum = ExpSubtractSum(x.data(), static_cast<int64_t>(x.size()), 0.0f);
  double want_sum = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double want = std::exp(double(orig[j]));
    want_sum += want;
    EXPECT_NEAR(x[j], want, 3e-6 * want + 1e-37) << orig[j];
  }
  EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
}

// Widening every bf16 and f16 bit pattern gives exactly the scalar
// conversion's bits (NaN stays NaN; F16C may quiet a signalling NaN), at
// every length modulo the vector width and from unaligned starts.
TEST_P(RowOpsTest, WideningMatchesTheScalarConversionForEveryPattern) {
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  for (int64_t off : {0, 3}) {
    const int64_t n = 65536;
    for (bool bf16 : {true, false}) {
      SCOPED_TRACE(bf16 ? "bf16" : "f16");
      WidenRow(all.data() + off, bf16 ? DType::kBF16 : DType::kF16, n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = all[off + i];
        const float want = bf16 ? F32FromBF16(h) : F32FromF16(h);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(out[i])) << h;
        } else {
          EXPECT_EQ(std::memcmp(&want, &out[i], sizeof(float)), 0) << h;
        }
      }
    }
  }
  for (int64_t n = 0; n <= 40; ++n) {  // short rows: the scalar tail
    std::fill(out.begin(), out.end(), -1.0f);
    WidenRow(all.data() + 16256, DType::kBF16, n, out.data());  // 0x3F80.. = 1.0 upward
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], F32FromBF16(all[16256 + i]));
    EXPECT_EQ(out[n], -1.0f);  // nothing past n
  }
}

// Decoding every fp8 code of both formats (the vector LoadFp8AsF32 on every
// Highway target, then the scalar tail) gives exactly core/fp8.h's value,
// signed zeros, subnormals, NaN and E5M2's infinities included, from
// unaligned starts and at every length.
TEST_P(RowOpsTest, Fp8DecodingMatchesTheScalarDecodeForEveryCode) {
  std::vector<uint8_t> all(2 * 256 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
  std::vector<float> out(all.size());
  for (DType type : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(type));
    for (int64_t off : {0, 5}) {
      for (int64_t n : {int64_t{256}, int64_t{256 + 3}, int64_t{7}}) {
        WidenRow(all.data() + off, type, n, out.data());
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t code = all[off + i];
          const float want = DecodeFp8(code, Fp8FormatOf(type));
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(out[i])) << int(code);
          } else {
            EXPECT_EQ(std::memcmp(&want, &out[i], sizeof(float)), 0)
                << int(code) << ": " << out[i] << " against " << want;
          }
        }
      }
    }
  }
}

// Dequantizing int8 rows gives the scalar product's bits for every value,
// at every length and from unaligned starts, touching nothing past n; a NaN
// scale (a row quantized from a NaN) makes every element NaN.
TEST_P(RowOpsTest, DequantizingMatchesTheScalarProduct) {
  SCOPED_TRACE(RowOpsTarget());
  std::vector<int8_t> all(256 + 8);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int8_t>(i - 128);
  std::vector<float> out(all.size() + 1);
  const float scale = 0.37f / 127.0f;
  for (int64_t n = 0; n <= 256; n += (n < 40 ? 1 : 27)) {
    for (int64_t off : {0, 3}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << off);
      std::fill(out.begin(), out.end(), -1.0f);
      DequantizeRow(all.data() + off, n, scale, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>(all[off + i]) * scale;
        EXPECT_EQ(std::memcmp(&want, &out[i], sizeof(float)), 0) << int(all[off + i]);
      }
      EXPECT_EQ(out[n], -1.0f);
    }
  }
  DequantizeRow(all.data(), 37, std::numeric_limits<float>::quiet_NaN(), out.data());
  for (int64_t i = 0; i < 37; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
}

TEST_P(RowOpsTest, AllBlockedRowHasMaxNegInf) {
  std::vector<float> x(13, kNegInf);
  EXPECT_EQ(RowMax(x.data(), 13), kNegInf);
}

// P rounded to 16 bits in its own row: every length and offset, weights
// across [0, 1] (ties, subnormals and 1.0 included), each value the scalar
// round-to-nearest-even conversion, the floats past 2n bytes untouched.
TEST_P(RowOpsTest, NarrowingRoundsToNearestEvenInPlace) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (DType type : {DType::kBF16, DType::kF16}) {
    for (int64_t n = 0; n <= 70; ++n) {
      for (int64_t offset : {0, 1, 3}) {
        std::vector<float> row(static_cast<size_t>(n + offset) + 4);
        for (float& v : row) v = unit(rng);
        for (int64_t j = 0; j < n; j += 5) row[offset + j] = 1.0f + 1.0f / 256;  // a bf16 tie
        if (n > 2) row[offset + 1] = 1e-40f, row[offset + 2] = 1.0f;
        const std::vector<float> before = row;
        NarrowRow(row.data() + offset, n, type, reinterpret_cast<uint16_t*>(row.data() + offset));
        const uint16_t* out = reinterpret_cast<const uint16_t*>(row.data() + offset);
        for (int64_t j = 0; j < n; ++j) {
          const float x = before[offset + j];
          ASSERT_EQ(out[j], type == DType::kBF16 ? BF16FromF32(x) : F16FromF32(x))
              << DTypeName(type) << " n " << n << " j " << j << " x " << x;
        }
        for (size_t j = offset + n; j < row.size(); ++j) ASSERT_EQ(row[j], before[j]);
      }
    }
  }
}

float FloatOfBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// An output row scaled and rounded to 16 bits: both signs, ties, values
// that round up to Inf, Inf, NaNs with payloads and subnormals, every length
// and offset, each element StoreFromF32's rounding of x * f bit for bit.
TEST_P(RowOpsTest, ScaledOutputRowsRoundAsStoreFromF32) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> any(-3.0f, 3.0f);
  const float specials[] = {kNegInf,
                            -kNegInf,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            FloatOfBits(0x7f812345u),  // a signalling NaN's payload
                            FloatOfBits(0x7fc1ffffu),  // low bits that would round up
                            FloatOfBits(0xffffffffu),
                            std::numeric_limits<float>::max(),
                            -(1.0f + 1.0f / 256),  // a bf16 tie
                            1.0f + 3.0f / 256,     // a tie that rounds up
                            1e-40f,
                            3.0e-6f,         // an f16 subnormal
                            2.98023224e-8f,  // 2^-25: a tie, to f16's 0
                            8.94069672e-8f,  // 3 x 2^-25: a tie, to 2 x 2^-24
                            65519.0f,        // f16's largest finite
                            65520.0f,        // rounds to f16's Inf
                            -0.0f};
  for (DType type : {DType::kBF16, DType::kF16}) {
    for (int64_t n = 0; n <= 70; ++n) {
      for (int64_t offset : {0, 1, 3}) {
        for (float f : {1.0f, 0.37f}) {
          std::vector<float> row(static_cast<size_t>(n + offset));
          for (float& v : row) v = any(rng);
          for (int64_t j = 0; j < n; j += 3)
            row[offset + j] = specials[(j / 3) % std::size(specials)];
          std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
          ScaleNarrowRow(row.data() + offset, n, f, type, out.data());
          for (int64_t j = 0; j < n; ++j) {
            // Room for any dtype StoreFromF32 could write (type is 16-bit here).
            uint16_t want[2] = {0, 0};
            StoreFromF32(want, type, 0, row[offset + j] * f);
            ASSERT_EQ(out[j], want[0]) << DTypeName(type) << " n " << n << " j " << j << " x "
                                       << row[offset + j] << " f " << f;
          }
          ASSERT_EQ(out[n], 0xabcd);  // nothing past n
        }
      }
    }
  }
}

// NarrowRow compacting a block's rows as attention_block.cc does: row r
// of [rows, kn] floats narrowed to halves r * kn from the block's start, in
// row order, so the 16-bit rows end up dense.
TEST_P(RowOpsTest, NarrowRowCompactsRowsDense) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (DType type : {DType::kBF16, DType::kF16}) {
    for (int64_t kn : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, int64_t{64}}) {
      const int64_t rows = 5;
      std::vector<float> block(static_cast<size_t>(rows * kn));
      for (float& v : block) v = unit(rng);
      const std::vector<float> before = block;
      uint16_t* dense = reinterpret_cast<uint16_t*>(block.data());
      for (int64_t r = 0; r < rows; ++r) NarrowRow(block.data() + r * kn, kn, type, dense + r * kn);
      for (int64_t x = 0; x < rows * kn; ++x) {
        ASSERT_EQ(dense[x], type == DType::kBF16 ? BF16FromF32(before[x]) : F16FromF32(before[x]))
            << DTypeName(type) << " kn " << kn << " at " << x;
      }
    }
  }
}

// FAST's backward rounding of P and dX (core/fast_compute.h
// RoundGradOperand) bit for bit: random values over many binades, the flush
// threshold 2^-63 on both sides, rounding ties, NaN, +-Inf and -0.
TEST_P(RowOpsTest, RoundGradOperandRowMatchesTheScalarRule) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-80, 20);
  std::vector<float> x(203);
  for (float& v : x) v = std::ldexp(mant(rng), exp(rng));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0x1p-63f,
                            std::nextafter(0x1p-63f, 0.0f),
                            -0x1p-63f,
                            -std::nextafter(0x1p-63f, 0.0f),
                            1.0f + 0x1p-8f,  // a tie: to even (1)
                            1.0f + 0x3p-8f,  // a tie: to even (1 + 2^-6)
                            nan,
                            -nan,
                            inf,
                            -inf,
                            -0.0f,
                            0.0f,
                            1e-45f,
                            0x1.ffp127f};  // rounds up to Inf
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) x[i * 13 + 5] = specials[i];
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{200}}) {
    for (int64_t off = 0; off < 3; ++off) {
      std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
      RoundGradOperandRow(x.data() + off, n, out.data());
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(out[j], RoundGradOperand(x[off + j]))
            << "n " << n << " j " << j << " x " << x[off + j];
      }
      ASSERT_EQ(out[n], 0xabcd);  // nothing past n
    }
  }
  EXPECT_EQ(RoundGradOperand(std::nextafter(0x1p-63f, 0.0f)), 0);
  EXPECT_EQ(RoundGradOperand(-std::nextafter(0x1p-63f, 0.0f)), 0x8000);
  EXPECT_EQ(F32FromBF16(RoundGradOperand(0x1p-63f)), 0x1p-63f);
  EXPECT_EQ(F32FromBF16(RoundGradOperand(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_TRUE(std::isnan(F32FromBF16(RoundGradOperand(nan))));
}

// The backward's exact narrowing of staged bf16 rows: the top halves, and
// false exactly when a nonzero magnitude below 2^-63 is present, wherever it
// sits (vector body or tail).
TEST_P(RowOpsTest, NarrowExactBF16RowFlagsTinyValues) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{37}, int64_t{100}}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = F32FromBF16(BF16FromF32(dist(rng)));
    if (n > 3) x[3] = -0.0f;  // zero is not tiny
    std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
    EXPECT_TRUE(NarrowExactBF16Row(x.data(), n, out.data())) << n;
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], BF16FromF32(x[j])) << n << " " << j;
    ASSERT_EQ(out[n], 0xabcd);
    for (int64_t at = 0; at < n; ++at) {
      for (float tiny : {0x1p-64f, -0x1p-100f, 1e-45f}) {
        std::vector<float> y = x;
        y[at] = tiny;
        EXPECT_FALSE(NarrowExactBF16Row(y.data(), n, out.data())) << n << " at " << at;
      }
      std::vector<float> y = x;
      y[at] = -0x1p-63f;  // the smallest magnitude allowed
      EXPECT_TRUE(NarrowExactBF16Row(y.data(), n, out.data())) << n << " at " << at;
    }
  }
}

TEST_P(RowOpsTest, IntegerScoresTimesRowAndKeyFactors) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(12);
  std::uniform_int_distribution<int32_t> sums(-2000000, 2000000);
  std::uniform_real_distribution<float> factor(0.001f, 0.1f);
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<int32_t> in(n);
    std::vector<float> cols(n), out(n);
    for (int64_t j = 0; j < n; ++j) in[j] = sums(rng), cols[j] = factor(rng);
    ScaleIntRow(in.data(), n, 0.37f, cols.data(), out.data());
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(out[j], static_cast<float>(in[j]) * 0.37f * cols[j]) << "n " << n << " j " << j;
    }
    // In place: the sums' own bytes.
    std::vector<int32_t> again = in;
    ScaleIntRow(again.data(), n, 0.37f, cols.data(), reinterpret_cast<float*>(again.data()));
    // n == 0 leaves both data() pointers null, which memcmp may not see.
    if (n > 0) {
      ASSERT_EQ(std::memcmp(again.data(), out.data(), n * sizeof(float)), 0);
    }
  }
}

TEST_P(RowOpsTest, MaxAndFiniteCheckInOnePassMatchTheirTwoPasses) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> score(-30.0f, 30.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e30f};
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<float> x(n);
    for (float& v : x) v = score(rng);
    for (int64_t at = -1; at < n; ++at) {  // -1: no special value
      for (const float special : specials) {
        std::vector<float> y = x;
        if (at >= 0) y[at] = special;
        bool finite = false;
        const float m = RowMaxFinite(y.data(), n, &finite);
        const float want = RowMax(y.data(), n);
        ASSERT_TRUE(std::memcmp(&m, &want, sizeof(m)) == 0) << "n " << n << " at " << at;
        ASSERT_EQ(finite, AllFinite(y.data(), n)) << "n " << n << " at " << at;
        if (at < 0) break;
      }
    }
  }
}

TEST_P(RowOpsTest, SixteenBitRowsAreFiniteUnlessAnExponentIsAllOnes) {
  SCOPED_TRACE(RowOpsTarget());
  struct Case {
    DType type;
    uint16_t largest, inf, nan;  // the largest finite value, +Inf, a NaN
  };
  for (const Case& c :
       {Case{DType::kBF16, 0x7f7f, 0x7f80, 0x7fc1}, Case{DType::kF16, 0x7bff, 0x7c00, 0x7e01}}) {
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<uint16_t> x(n + 1);
      for (int64_t j = 0; j < n; ++j)
        x[j] = static_cast<uint16_t>(j % 2 ? c.largest : c.largest | 0x8000);
      x[n] = c.nan;  // past the row: never read
      ASSERT_TRUE(AllFinite16(x.data(), n, c.type)) << DTypeName(c.type) << " n " << n;
      for (int64_t at = 0; at < n; ++at) {
        for (const uint16_t bad : {c.inf, c.nan, static_cast<uint16_t>(c.inf | 0x8000)}) {
          const uint16_t saved = x[at];
          x[at] = bad;
          ASSERT_FALSE(AllFinite16(x.data(), n, c.type))
              << DTypeName(c.type) << " n " << n << " at " << at;
          x[at] = saved;
        }
      }
    }
  }
}

// QuantizeWeightsRowU8 against the rule written out in scalar code: per
// block of kFastWeightBlock keys, w = p * v_scale, back = max w / 255, q =
// round(w / back) to nearest even (w * (1 / back), as the kernels multiply).
TEST_P(RowOpsTest, WeightsQuantizeToU8PerBlockOrAreRefused) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> weight(0.0f, 1.0f), scale(0.001f, 0.02f);
  for (const int64_t kn : {1, 5, 16, 63, 64, 65, 100, 128, 200}) {
    const int64_t full = kn / kFastWeightBlock;
    const int64_t blocks = (kn + kFastWeightBlock - 1) / kFastWeightBlock;
    const int64_t stride = kFastWeightBlock + 7;  // block starts as far apart as asked
    std::vector<float> p(kn), vs(kn), back(blocks, -2.0f);
    for (int64_t j = 0; j < kn; ++j) p[j] = weight(rng), vs[j] = scale(rng);
    if (kn > 64) std::fill(p.begin() + 64, p.begin() + std::min<int64_t>(kn, 128), 0.0f);
    std::vector<uint8_t> out(full * stride + 64, 0xEE), tail(64, 0xEE);
    ASSERT_TRUE(
        QuantizeWeightsRowU8(p.data(), vs.data(), kn, out.data(), stride, tail.data(), back.data()))
        << kn;
    for (int64_t x = 0; x < blocks; ++x) {
      const int64_t j0 = x * kFastWeightBlock, n = std::min(kn - j0, kFastWeightBlock);
      float m = 0;
      for (int64_t j = j0; j < j0 + n; ++j) m = std::max(m, p[j] * vs[j]);
      ASSERT_EQ(back[x], m / 255.0f) << "kn " << kn << " block " << x;
      const uint8_t* q = x < full ? out.data() + x * stride : tail.data();
      for (int64_t j = 0; j < n; ++j) {
        const float want =
            m == 0 ? 0.0f : std::nearbyint(p[j0 + j] * vs[j0 + j] * (1.0f / back[x]));
        ASSERT_EQ(q[j], static_cast<uint8_t>(want)) << "kn " << kn << " key " << j0 + j;
      }
      ASSERT_EQ(q[n], 0xEE) << "kn " << kn << ": written past block " << x;
    }
  }
  // Refused: a NaN, an Inf or a negative weight (in a full block or in the
  // partial last one), or a block whose largest weight is tiny but not 0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float bad : {nan, inf, -0.5f}) {
    for (const int64_t at : {5, 66}) {  // a full block's vector body, the partial block
      std::vector<float> p(70, 0.25f), vs(70, 1.0f), back(2);
      std::vector<uint8_t> out(64), tail(64);
      p[at] = bad;
      EXPECT_FALSE(
          QuantizeWeightsRowU8(p.data(), vs.data(), 70, out.data(), 64, tail.data(), back.data()))
          << bad << " at " << at;
    }
  }
  {
    std::vector<float> p(70, 0.0f), vs(70, 1.0f), back(2);
    std::vector<uint8_t> out(64), tail(64);
    std::fill(p.begin(), p.begin() + 64, 1e-31f);
    EXPECT_FALSE(
        QuantizeWeightsRowU8(p.data(), vs.data(), 70, out.data(), 64, tail.data(), back.data()));
  }
  // A zero weight times a negative scale is -0: not refused.
  std::vector<float> p(8, 0.0f), vs(8, -1.0f), back(1);
  std::vector<uint8_t> tail(8, 0xEE);
  p[0] = 0.5f, vs[0] = 2.0f;
  ASSERT_TRUE(QuantizeWeightsRowU8(p.data(), vs.data(), 8, nullptr, 64, tail.data(), back.data()));
  EXPECT_EQ(tail[0], 255);
  EXPECT_EQ(tail[7], 0);
}

TEST_P(RowOpsTest, IntegerSumsAccumulateTimesTheirScale) {
  SCOPED_TRACE(RowOpsTarget());
  std::mt19937 rng(22);
  std::uniform_int_distribution<int32_t> sums(-4000000, 4000000);
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<int32_t> in(n);
    std::vector<float> o(n + 1, 0.0f);
    for (int64_t j = 0; j < n; ++j) in[j] = sums(rng), o[j] = 0.5f * static_cast<float>(j);
    o[n] = 99.0f;
    AccumulateIntRow(in.data(), n, 0.0625f, o.data());  // a power of two: every result exact
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(o[j], 0.5f * static_cast<float>(j) + static_cast<float>(in[j]) * 0.0625f) << j;
    }
    ASSERT_EQ(o[n], 99.0f);
  }
}

}  // namespace
}  // namespace blas
}  // namespace attnkit

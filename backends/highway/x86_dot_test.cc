// The storage-type dot-product kernels (x86_dot.h) against plain loops, on
// shapes with every remainder the callers produce: odd key counts, a
// missing last key pair, zeroed value rows, head dims that are not a
// multiple of 64 bytes of int8. Exact where the kernels are exact (bf16
// products and int8 dot products), within f32 summation error otherwise.
// A CPU without the instructions skips, saying which.
#include "backends/highway/x86_dot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp8.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "platform/hwy_target_cap.h"

namespace attnkit {
namespace {

// The AVX-512 kernels (every one here but AvxVnniQDotK4 and
// AvxVnniWeightedQuadsV4, whose own tests stay in X86DotTest) run in the
// decode and prefill only from their AVX3 and AVX3_DL targets (x86_dot.h),
// so a process whose Highway targets are capped below those
// (ATTNKIT_HWY_TARGET=AVX2, platform/hwy_target_cap.h) never calls them,
// and their tests skip there as the per-target tests do. The cap is what
// the use-after-return sanitizer pass runs under (.bazelrc's sanitize_uar):
// its fake stack frames are 32-byte aligned, where 64-byte locals and
// spills fault; the first sanitizer pass runs these tests.
class X86Dot512Test : public testing::Test {
 protected:
  void SetUp() override {
    if ((SupportedHighwayTargets() & (HWY_AVX3 | HWY_AVX3_DL)) == 0) {
      GTEST_SKIP() << "Highway's targets here lack AVX3 (no AVX-512, or ATTNKIT_HWY_TARGET caps "
                      "them): the AVX-512 kernels are not called";
    }
  }
};

std::vector<uint16_t> RandomBF16(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t& x : out) x = BF16FromF32(u(*rng));
  return out;
}

using QDotKFn = void (*)(const uint32_t*, size_t, const uint16_t*, size_t, size_t, size_t, size_t,
                         float, float*, size_t);

// kernel (BF16QDotK's contract) against exact products on every rows x d x
// keys given: strided K rows, scores written for the keys asked only.
void ExpectQDotKExact(QDotKFn kernel, std::initializer_list<size_t> rows_list,
                      std::initializer_list<size_t> ds, std::initializer_list<size_t> keys_list,
                      std::mt19937* rng) {
  for (size_t rows : rows_list) {
    for (size_t d : ds) {
      for (size_t keys : keys_list) {
        const size_t ldk = d + 6;  // strided K rows
        const std::vector<uint16_t> q = RandomBF16(rows * d, rng);
        const std::vector<uint16_t> k = RandomBF16(keys * ldk, rng);
        std::vector<uint32_t> qp(d / 2 * rows);
        for (size_t r = 0; r < rows; ++r) {
          for (size_t c = 0; c < d; c += 2) {
            qp[c / 2 * rows + r] = q[r * d + c] | static_cast<uint32_t>(q[r * d + c + 1]) << 16;
          }
        }
        // One key row past `keys` of NaN scores: never written.
        std::vector<float> s((keys + 1) * rows, std::nanf(""));
        const float scale = 0.125f;  // a power of two: the product is exact
        kernel(qp.data(), rows, k.data(), ldk, d, rows, keys, scale, s.data(), rows);
        for (size_t r = 0; r < rows; ++r) ASSERT_TRUE(std::isnan(s[keys * rows + r]));
        for (size_t j = 0; j < keys; ++j) {
          for (size_t r = 0; r < rows; ++r) {
            double want = 0, abs_sum = 0;
            for (size_t c = 0; c < d; ++c) {
              const double x = double(F32FromBF16(q[r * d + c])) * F32FromBF16(k[j * ldk + c]);
              want += x;
              abs_sum += std::fabs(x);
            }
            // d f32 roundings of partial sums at most (the products are exact).
            const double bound = scale * d * std::ldexp(abs_sum, -24);
            ASSERT_NEAR(s[j * rows + r], scale * want, bound)
                << "rows " << rows << " d " << d << " key " << j << " row " << r;
          }
        }
      }
    }
  }
}

TEST_F(X86Dot512Test, BF16QDotKMatchesExactProducts) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(1);
  // 64 and 128 rows: blocks of 4 vectors; 32 and 96: blocks of 2.
  ExpectQDotKExact(x86_dot::BF16QDotK, {32, 64, 96, 128}, {16, 64, 128}, {1, 2, 7, 8, 13, 64},
                   &rng);
}

TEST_F(X86Dot512Test, AmxQDotKMatchesExactProducts) {
  if (!x86_dot::HaveAmxBF16()) {
    GTEST_SKIP() << "no AMX-BF16 here (CPU, Linux's tile permission or ATTNKIT_AMX=0)";
  }
  std::mt19937 rng(11);
  // Blocks of 32 keys, then of 16, then a padded one; d up to MLA's 576.
  ExpectQDotKExact(x86_dot::AmxQDotK, {32, 64, 96}, {32, 64, 128, 576},
                   {1, 2, 15, 16, 17, 31, 32, 33, 47, 64, 100}, &rng);
}

TEST_F(X86Dot512Test, AmxQDotKScoresDoNotDependOnTheKeysPosition) {
  if (!x86_dot::HaveAmxBF16()) {
    GTEST_SKIP() << "no AMX-BF16 here (CPU, Linux's tile permission or ATTNKIT_AMX=0)";
  }
  // Runs of paged rows end anywhere: a key's scores must not depend on
  // which block (32, 16 or a padded one) computed them, or paged and dense
  // results would differ.
  std::mt19937 rng(12);
  const size_t rows = 32, d = 128, keys = 50;
  const std::vector<uint16_t> k = RandomBF16(keys * d, &rng);
  const std::vector<uint16_t> q = RandomBF16(rows * d, &rng);
  std::vector<uint32_t> qp(d / 2 * rows);
  std::memcpy(qp.data(), q.data(), qp.size() * sizeof(uint32_t));  // any pairs will do
  std::vector<float> whole(keys * rows);
  x86_dot::AmxQDotK(qp.data(), rows, k.data(), d, d, rows, keys, 0.3f, whole.data(), rows);
  for (size_t split = 1; split < keys; ++split) {
    std::vector<float> parts(keys * rows);
    x86_dot::AmxQDotK(qp.data(), rows, k.data(), d, d, rows, split, 0.3f, parts.data(), rows);
    x86_dot::AmxQDotK(qp.data(), rows, k.data() + split * d, d, d, rows, keys - split, 0.3f,
                      parts.data() + split * rows, rows);
    ASSERT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)), 0)
        << "split at " << split;
  }
}

TEST_F(X86Dot512Test, BF16TransposePairsMovesEveryPair) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(5);
  for (size_t pairs : {1, 15, 16, 17, 32, 64, 72}) {
    const size_t ldq = 48;  // 16 rows of a wider tile
    const std::vector<uint16_t> q = RandomBF16(16 * 2 * pairs, &rng);
    const uint16_t* rows[16];
    for (size_t r = 0; r < 16; ++r) rows[r] = r % 5 == 4 ? nullptr : q.data() + r * 2 * pairs;
    std::vector<uint32_t> qp(pairs * ldq, 0xdeadbeef);
    x86_dot::BF16TransposePairs(rows, pairs, qp.data() + 8, ldq);
    for (size_t c2 = 0; c2 < pairs; ++c2) {
      for (size_t r = 0; r < ldq; ++r) {
        uint32_t want = 0xdeadbeef;  // outside the 16 rows: untouched
        if (r >= 8 && r < 24) {
          const uint16_t* row = rows[r - 8];
          want = row == nullptr ? 0 : row[2 * c2] | static_cast<uint32_t>(row[2 * c2 + 1]) << 16;
        }
        ASSERT_EQ(qp[c2 * ldq + r], want) << "pairs " << pairs << " pair " << c2 << " row " << r;
      }
    }
  }
}

using WeightedSumVFn = void (*)(const uint32_t*, size_t, const uint32_t*, size_t, size_t,
                                const float*, size_t, size_t, float*, size_t, const float*);

// kernel (BF16WeightedSumV's contract) against the bf16-rounded weights:
// `rows` rows of O (pp and P padded to ldp rows), pairs past each aligned
// block of `block` rows' last visible key NaN (the FAST softmax leaves them
// unwritten past its vectors of 16 rows).
void ExpectWeightedSumV(WeightedSumVFn kernel, size_t rows, size_t ldp, size_t block,
                        std::initializer_list<size_t> ds, std::initializer_list<size_t> keys_list,
                        std::mt19937* rng) {
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (size_t d : ds) {
    for (size_t keys : keys_list) {
      for (bool ends : {false, true}) {
        const size_t ldv = d + 10;
        std::vector<float> p(keys * ldp);
        for (float& x : p) x = u01(*rng);
        // With key_end: row r sees keys [0, key_end[r]) (causal-like, some
        // rows none, some all, so that blocks stop short), its weights past
        // them 0.
        std::vector<float> key_end(ldp, static_cast<float>(keys));
        // (Every second block of 16 rows holds a row that sees them all, so
        // blocks of 8 and of 16 rows both meet pairs left unwritten.)
        for (size_t r = 0; ends && r < ldp; ++r) {
          key_end[r] = r % 32 == 31
                           ? static_cast<float>(keys + 1)
                           : static_cast<float>((r * keys) / ldp) - (r % 5 == 0 ? 1.0f : 0.0f);
          for (size_t j = 0; j < keys; ++j) {
            if (static_cast<float>(j) >= key_end[r]) p[j * ldp + r] = 0.0f;
          }
        }
        const std::vector<uint16_t> v = RandomBF16(keys * ldv, rng);
        std::vector<int32_t> zero_rows;
        if (keys > 3) zero_rows = {1, static_cast<int32_t>(keys - 1)};  // incl. an odd last row
        const size_t pairs = (keys + 1) / 2;
        // One pair row of V past the last: NaN, never to be read.
        std::vector<uint32_t> pp(pairs * ldp), vp((pairs + 1) * d, 0x7fc07fc0);
        x86_dot::BF16PackWeights(p.data(), ldp, keys, ldp, pp.data(), ldp);
        // Past each aligned block's last visible key the pairs may hold
        // anything: NaN, which reaches the output if they are read.
        for (size_t r0 = 0; ends && r0 < ldp; r0 += block) {
          float end = 0.0f;
          for (size_t r = r0; r < r0 + block; ++r) end = std::max(end, key_end[r]);
          for (size_t jp = (static_cast<size_t>(end) + 1) / 2; jp < pairs; ++jp) {
            for (size_t r = r0; r < r0 + block; ++r) pp[jp * ldp + r] = 0x7fc07fc0;
          }
        }
        std::vector<const uint16_t*> row_ptrs(keys);
        for (size_t j = 0; j < keys; ++j) row_ptrs[j] = v.data() + j * ldv;
        for (int32_t z : zero_rows) row_ptrs[z] = nullptr;
        x86_dot::BF16PackValues(row_ptrs.data(), keys, d, d, vp.data(), d);
        // O rows past `rows`: NaN, to stay so.
        std::vector<float> o(ldp * d, std::nanf("")), alpha(ldp);
        for (size_t i = 0; i < rows * d; ++i) o[i] = u01(*rng);
        for (float& a : alpha) a = u01(*rng);
        const std::vector<float> o0 = o;
        kernel(pp.data(), ldp, vp.data(), d, pairs, alpha.data(), rows, d, o.data(), d,
               ends ? key_end.data() : nullptr);
        for (size_t i = rows * d; i < ldp * d; ++i) ASSERT_TRUE(std::isnan(o[i]));
        for (size_t r = 0; r < rows; ++r) {
          for (size_t c = 0; c < d; ++c) {
            double want = double(alpha[r]) * o0[r * d + c], abs_sum = std::fabs(want);
            for (size_t j = 0; j < keys; ++j) {
              bool zero = false;
              for (int32_t z : zero_rows) zero = zero || static_cast<size_t>(z) == j;
              if (zero) continue;
              const double w = F32FromBF16(BF16FromF32(p[j * ldp + r]));  // nearest even
              want += w * F32FromBF16(v[j * ldv + c]);
              abs_sum += std::fabs(w * F32FromBF16(v[j * ldv + c]));
            }
            const double bound = (keys + 2) * std::ldexp(abs_sum, -24);
            ASSERT_NEAR(o[r * d + c], want, bound) << "d " << d << " keys " << keys << " row " << r
                                                   << " col " << c << " ends " << ends;
          }
        }
      }
    }
  }
}

TEST_F(X86Dot512Test, BF16WeightedSumVMatchesRoundedWeights) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(2);
  // d 64 and 128 take the 8-row tiles, the rest 4-row ones.
  ExpectWeightedSumV(x86_dot::BF16WeightedSumV, 32, 32, 8, {16, 48, 64, 80, 128}, {1, 2, 5, 33, 64},
                     &rng);
}

TEST_F(X86Dot512Test, AmxWeightedSumVMatchesRoundedWeights) {
  if (!x86_dot::HaveAmxBF16()) {
    GTEST_SKIP() << "no AMX-BF16 here (CPU, Linux's tile permission or ATTNKIT_AMX=0)";
  }
  std::mt19937 rng(13);
  // Blocks of 16 rows; rows 20 and 40 end inside one; 16 columns left
  // alone where d is an odd number of 16s; keys past 32 and 64 take
  // another chunk of 16 pairs.
  for (size_t rows : {32, 20, 40, 64}) {
    ExpectWeightedSumV(x86_dot::AmxWeightedSumV, rows, (rows + 31) / 32 * 32, 16,
                       {16, 48, 64, 128, 512}, {1, 2, 5, 31, 32, 33, 64, 100, 128}, &rng);
  }
}

// A thread's tiles as another library may leave them: a configuration of
// its own (every tile 8 rows x 32 bytes) or released (tilerelease).
__attribute__((target("amx-tile"))) void LoadOtherTileConfiguration() {
  alignas(64) static const uint8_t config[64] = {
      1,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0,   // palette 1
      32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0,   // colsb 0-7
      0,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0, 0,  0,   // colsb 8-15
      8,  8, 8,  8, 8,  8, 8,  8, 0,  0, 0,  0, 0,  0, 0,  0};  // rows
  asm volatile("ldtilecfg %0" ::"m"(config));
}
__attribute__((target("amx-tile"))) void ReleaseTiles() { asm volatile("tilerelease"); }

// The kernels load their configuration where the thread's tiles hold
// another or none (x86_amx_tiles.h reads the state rather than remember
// it): with the other library's 8 x 32 tiles left in place, their sums
// would cover a quarter of the products.
TEST_F(X86Dot512Test, AmxKernelsConfigureTilesLeftByAnotherLibrary) {
  if (!x86_dot::HaveAmxBF16()) {
    GTEST_SKIP() << "no AMX-BF16 here (CPU, Linux's tile permission or ATTNKIT_AMX=0)";
  }
  std::mt19937 rng(12);
  ExpectQDotKExact(x86_dot::AmxQDotK, {32}, {64}, {16}, &rng);  // configured by the kernel
  LoadOtherTileConfiguration();
  ExpectQDotKExact(x86_dot::AmxQDotK, {32}, {64}, {16, 40}, &rng);
  LoadOtherTileConfiguration();
  ExpectWeightedSumV(x86_dot::AmxWeightedSumV, 32, 32, 16, {64}, {32}, &rng);
  ReleaseTiles();
  ExpectQDotKExact(x86_dot::AmxQDotK, {32}, {64}, {16}, &rng);
  ReleaseTiles();
  ExpectWeightedSumV(x86_dot::AmxWeightedSumV, 32, 32, 16, {64}, {32}, &rng);
}

TEST_F(X86Dot512Test, VnniQDotK4IsTheExactIntegerDotTimesTheRowScale) {
  if (!x86_dot::HaveVnni()) GTEST_SKIP() << "this CPU has no AVX512_VNNI";
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> i8(-127, 127);
  // Whole 64-byte steps 1-4 (d 64-256) are written out, and 1-2 before a
  // tail (d 80-176); others looped.
  for (size_t d : {16, 48, 64, 80, 128, 144, 192, 208, 256, 272, 1024}) {
    const size_t ldq = (d + 63) / 64 * 64, keys = 19, ldk = d + 32;
    std::vector<int8_t> q(4 * ldq, 0), k(keys * ldk);
    std::vector<int32_t> sum128(4, 0);
    for (size_t r = 0; r < 4; ++r) {
      for (size_t c = 0; c < d; ++c) {
        q[r * ldq + c] = static_cast<int8_t>(r == 3 ? 127 : i8(rng));  // a row at the extreme
        sum128[r] += 128 * q[r * ldq + c];
      }
    }
    for (int8_t& x : k) x = static_cast<int8_t>(i8(rng));
    for (size_t c = 0; c < d; ++c) k[c] = -127;  // key 0 at the other extreme
    const std::vector<float> row_scale = {1.0f, 0.5f, 0.25f, 2.0f};
    // lds 4: the packed layout (four keys stored at once); 6: rows with gaps
    // (left untouched). 19 keys: four blocks of four, then three alone. The
    // rows prefetched into L1, and K rows ahead alone (no V rows), change
    // nothing.
    const x86_dot::L1Rows l1{reinterpret_cast<const uint8_t*>(k.data()), ldk, d, keys};
    for (size_t lds : {4, 6}) {
      std::vector<float> s(keys * lds, -1.0f);
      x86_dot::VnniQDotK4(q.data(), ldq, sum128.data(), row_scale.data(), k.data(), ldk, d, keys,
                          s.data(), lds, k.data(), ldk, lds == 6 ? nullptr : k.data(), ldk, 3,
                          lds == 6 ? l1 : x86_dot::L1Rows{});
      for (size_t j = 0; j < keys; ++j) {
        for (size_t r = 0; r < lds; ++r) {
          if (r >= 4) {
            EXPECT_EQ(s[j * lds + r], -1.0f) << "gap written: d " << d << " key " << j;
            continue;
          }
          int64_t dot = 0;
          for (size_t c = 0; c < d; ++c) dot += int64_t{q[r * ldq + c]} * k[j * ldk + c];
          EXPECT_EQ(s[j * lds + r], static_cast<float>(static_cast<float>(dot) * row_scale[r]))
              << "d " << d << " lds " << lds << " key " << j << " row " << r;
        }
      }
    }
  }
}

// Bytes that end where an inaccessible page begins: a read past the last
// one faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t n) : page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    size_ = (n + page_ - 1) / page_ * page_ + page_;
    void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = m == MAP_FAILED ? nullptr : static_cast<int8_t*>(m);
    if (base_ != nullptr && mprotect(base_ + size_ - page_, page_, PROT_NONE) != 0) {
      munmap(base_, size_);
      base_ = nullptr;
    }
    data_ = base_ == nullptr ? nullptr : base_ + size_ - page_ - n;
  }
  ~GuardedBytes() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  int8_t* data() { return data_; }

 private:
  size_t page_, size_ = 0;
  int8_t* base_ = nullptr;
  int8_t* data_ = nullptr;
};

// int8 P.V with u8 weights: the exact integer sums of the weights as
// the kernel quantizes them (f32 scale and inverse, round to nearest even),
// times the scale, added to alpha O in one rounding. Head dims that end
// mid-block, 40 mid-vector too (the last V row ending at an inaccessible
// page, so a load past dv bytes faults), odd key counts, a row of zero
// weights (O only rescaled), alpha null (1), columns [dv, dvp) only
// rescaled; and the refusals: a NaN, Inf or negative weight, or a row
// whose largest weight is tiny, returns false with O unchanged. `lanes`:
// the kernel's f32 vector (dvp a multiple of it); the 256-bit kernel also
// gets head dims that end mid-way through its 32-byte column blocks.
using WeightedQuadsFn = bool (*)(const float*, size_t, const int8_t* const*, size_t, size_t,
                                 const float*, float*, size_t, const x86_dot::L1Rows&,
                                 const x86_dot::L1Rows&);
void CheckWeightedQuads(WeightedQuadsFn weighted_quads, size_t lanes) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::uniform_real_distribution<float> weight(0.0f, 1.5f);
  // dv 30 and 36 end inside the 256-bit kernel's last 32-byte block (30: a
  // byte copy, 36: a dword mask); a second dvp a block or more past dv
  // leaves whole vectors of O only rescaled.
  for (size_t dv : {8, 16, 24, 30, 36, 40, 48, 72, 80, 128, 144}) {
    if (dv % 16 != 0 && lanes == 16 && dv != 40) continue;  // the 512-bit kernel's set
    for (size_t dvp : {(dv + lanes - 1) / lanes * lanes, (dv + 31) / 32 * 32 + 16}) {
      for (size_t keys : {1, 2, 3, 7, 32, 64}) {
        for (bool with_alpha : {true, false}) {
          const size_t ldv = dv + 16;
          std::vector<int8_t> rows(keys * ldv);
          for (int8_t& x : rows) x = static_cast<int8_t>(i8(rng));
          GuardedBytes last(dv);  // the last key's row, ending at the guard
          ASSERT_NE(last.data(), nullptr);
          for (size_t c = 0; c < dv; ++c) last.data()[c] = static_cast<int8_t>(i8(rng));
          std::vector<const int8_t*> v(keys + 3);
          for (size_t j = 0; j < keys; ++j) v[j] = rows.data() + j * ldv;
          v[keys - 1] = last.data();
          for (size_t j = keys; j < keys + 3; ++j) v[j] = v[keys - 1];
          const size_t keys4 = (keys + 3) / 4 * 4;
          std::vector<float> p(keys4 * 4, 0.0f);
          for (size_t j = 0; j < keys; ++j) {
            for (size_t r = 0; r < 3; ++r) p[j * 4 + r] = weight(rng);
          }  // row 3: all zero
          const std::vector<float> alpha = {0.5f, 1.0f, 0.25f, 0.75f};
          // O's rows ldo = dvp + 8 apart: the 8 floats past each row's dvp
          // (and past the last row) are NaN and must stay so.
          const size_t ldo = dvp + 8;
          std::vector<float> o(4 * ldo, std::nanf("")), want;
          for (size_t r = 0; r < 4; ++r) {
            for (size_t c = 0; c < dvp; ++c) o[r * ldo + c] = weight(rng);
          }
          want = o;
          for (size_t r = 0; r < 4; ++r) {
            float mx = 0;
            for (size_t j = 0; j < keys; ++j) mx = std::max(mx, std::fabs(p[j * 4 + r]));
            const float back = mx / 255.0f, inv = mx == 0 ? 0.0f : 1.0f / back;
            for (size_t c = 0; c < dvp; ++c) {
              int64_t sum = 0;
              for (size_t j = 0; c < dv && j < keys; ++j) {
                sum += static_cast<int64_t>(std::nearbyint(p[j * 4 + r] * inv)) * v[j][c];
              }
              const float a = with_alpha ? alpha[r] : 1.0f;
              want[r * ldo + c] = std::fma(o[r * ldo + c], a, static_cast<float>(sum) * back);
            }
          }
          // With the first rows prefetched into L1 (as the V rows ahead),
          // and into L2 without alpha.
          const x86_dot::L1Rows l1{reinterpret_cast<const uint8_t*>(rows.data()), ldv, dv,
                                   keys - 1};
          ASSERT_TRUE(weighted_quads(
              p.data(), keys, v.data(), dv, dvp, with_alpha ? alpha.data() : nullptr, o.data(), ldo,
              with_alpha ? l1 : x86_dot::L1Rows{}, with_alpha ? x86_dot::L1Rows{} : l1));
          for (size_t x = 0; x < o.size(); ++x) {
            if (std::isnan(want[x])) {
              ASSERT_TRUE(std::isnan(o[x])) << "dv " << dv << " dvp " << dvp << " wrote " << x;
              continue;
            }
            ASSERT_EQ(o[x], want[x]) << "dv " << dv << " dvp " << dvp << " keys " << keys << " row "
                                     << x / ldo << " column " << x % ldo;
          }
          // Refused, O untouched: a NaN, an Inf, a negative weight, a
          // largest weight of 1e-35.
          for (float bad : {std::nanf(""), INFINITY, -0.5f, 1e-35f}) {
            std::vector<float> q = p;
            if (bad == 1e-35f) {
              for (size_t j = 0; j < keys; ++j) q[j * 4 + 2] = j == 0 ? bad : 0.0f;
            } else {
              q[(keys - 1) * 4 + 1] = bad;
            }
            const std::vector<float> before = o;
            EXPECT_FALSE(weighted_quads(q.data(), keys, v.data(), dv, dvp, alpha.data(), o.data(),
                                        ldo, l1, l1))
                << "weight " << bad;
            EXPECT_EQ(std::memcmp(o.data(), before.data(), o.size() * sizeof(float)), 0);
          }
        }
      }
    }
  }
}

TEST_F(X86Dot512Test, WeightedQuadsV4IsTheExactIntegerSumOfQuantizedWeights) {
  if (!x86_dot::HaveVnni()) GTEST_SKIP() << "this CPU has no AVX512_VNNI";
  CheckWeightedQuads(&x86_dot::WeightedQuadsV4, 16);
}

TEST(X86DotTest, AvxVnniWeightedQuadsV4IsTheExactIntegerSumOfQuantizedWeights) {
  if (!x86_dot::HaveAvxVnni()) GTEST_SKIP() << "this CPU has no AVX-VNNI (AVX2, FMA + avxvnni)";
  CheckWeightedQuads(&x86_dot::AvxVnniWeightedQuadsV4, 8);
}

// Where the CPU has both, the 256-bit kernel gives the 512-bit one's bits
// (so the P.V of an int8 decode tile does not depend on the target that
// ran it): head dims with and without columns only rescaled, alpha null or
// not, a row of zero weights, weights that scale to exact halves (rounded
// to even), and 512 keys of V = -128 with every weight at its row's
// largest (the integer sums' largest magnitude).
TEST_F(X86Dot512Test, AvxVnniWeightedQuadsV4GivesWeightedQuadsV4sBits) {
  if (!x86_dot::HaveVnni() || !x86_dot::HaveAvxVnni()) {
    GTEST_SKIP() << "this CPU lacks AVX512_VNNI or AVX-VNNI";
  }
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::uniform_real_distribution<float> weight(0.0f, 3.0f);
  struct Case {
    size_t dv, dvp, keys;
    bool extreme;  // V = -128, weights at the row maximum
  };
  for (const Case& k : {Case{16, 16, 1, false}, Case{40, 48, 5, false}, Case{64, 64, 64, false},
                        Case{128, 128, 61, false}, Case{144, 160, 64, false},
                        Case{128, 128, 512, true}, Case{80, 96, 509, true}}) {
    for (bool with_alpha : {true, false}) {
      std::vector<int8_t> rows((k.keys + 3) * k.dv);
      for (int8_t& x : rows) x = k.extreme ? int8_t{-128} : static_cast<int8_t>(i8(rng));
      std::vector<const int8_t*> v(k.keys + 3);
      for (size_t j = 0; j < k.keys + 3; ++j) v[j] = rows.data() + std::min(j, k.keys - 1) * k.dv;
      std::vector<float> p((k.keys + 3) / 4 * 16, 0.0f);
      for (size_t j = 0; j < k.keys; ++j) {
        // Row 0: random; row 1: a maximum of 255 / 16 (so 255 / max is 16
        // exactly) and weights (n + 0.5) / 16, exact halves after scaling;
        // row 2: all zero; row 3: random or the maximum everywhere.
        p[4 * j] = weight(rng);
        p[4 * j + 1] = j == 0 ? 15.9375f : (static_cast<float>(j % 255) + 0.5f) / 16.0f;
        p[4 * j + 3] = k.extreme ? 1.5f : weight(rng);
      }
      const std::vector<float> alpha = {0.5f, 1.0f, 0.125f, 2.0f};
      std::vector<float> o512(4 * k.dvp), o256;
      for (float& x : o512) x = weight(rng) - 1.5f;
      o256 = o512;
      const float* a = with_alpha ? alpha.data() : nullptr;
      ASSERT_TRUE(
          x86_dot::WeightedQuadsV4(p.data(), k.keys, v.data(), k.dv, k.dvp, a, o512.data(), k.dvp));
      ASSERT_TRUE(x86_dot::AvxVnniWeightedQuadsV4(p.data(), k.keys, v.data(), k.dv, k.dvp, a,
                                                  o256.data(), k.dvp));
      ASSERT_EQ(std::memcmp(o256.data(), o512.data(), o256.size() * sizeof(float)), 0)
          << "dv " << k.dv << " dvp " << k.dvp << " keys " << k.keys;
    }
  }
}

// The 256-bit kernel: every 32-byte step with and without a 16-byte tail,
// one key and odd key counts, K at both extremes (-128: K + 128 = 0; 127),
// rows at lds > 4 (the gaps untouched), and the last K row ending at an
// inaccessible page, so a load past a row's d bytes fails the test.
TEST(X86DotTest, AvxVnniQDotK4IsTheExactIntegerDotTimesTheRowScale) {
  if (!x86_dot::HaveAvxVnni()) GTEST_SKIP() << "this CPU has no AVX-VNNI (AVX2 + avxvnni)";
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> q8(-127, 127), k8(-128, 127);
  for (size_t d : {16, 32, 48, 64, 80, 128, 1024}) {
    for (size_t keys : {1, 2, 7, 19}) {
      const size_t ldq = (d + 63) / 64 * 64, ldk = d + 16, lds = 6;
      std::vector<int8_t> q(4 * ldq, 0);
      std::vector<int32_t> sum128(4, 0);
      for (size_t r = 0; r < 4; ++r) {
        for (size_t c = 0; c < d; ++c) {
          // Rows 2 and 3 at the extremes of a quantized row.
          q[r * ldq + c] = static_cast<int8_t>(r == 2 ? -127 : r == 3 ? 127 : q8(rng));
          sum128[r] += 128 * q[r * ldq + c];
        }
      }
      GuardedBytes guarded((keys - 1) * ldk + d);
      int8_t* k = guarded.data();
      ASSERT_NE(k, nullptr) << "mmap";
      for (size_t j = 0; j < keys; ++j) {
        for (size_t c = 0; c < d; ++c) {
          k[j * ldk + c] = static_cast<int8_t>(j == 0 ? -128 : j == 1 ? 127 : k8(rng));
        }
      }
      const std::vector<float> row_scale = {1.0f, 0.5f, 0.25f, 2.0f};
      std::vector<float> s(keys * lds, -1.0f);
      x86_dot::AvxVnniQDotK4(q.data(), ldq, sum128.data(), row_scale.data(), k, ldk, d, keys,
                             s.data(), lds, k, ldk, keys == 7 ? nullptr : k, ldk, 3);
      for (size_t j = 0; j < keys; ++j) {
        for (size_t r = 0; r < 4; ++r) {
          int64_t dot = 0;
          for (size_t c = 0; c < d; ++c) dot += int64_t{q[r * ldq + c]} * k[j * ldk + c];
          EXPECT_EQ(s[j * lds + r], static_cast<float>(static_cast<float>(dot) * row_scale[r]))
              << "d " << d << " keys " << keys << " key " << j << " row " << r;
        }
        EXPECT_EQ(s[j * lds + 4], -1.0f) << "d " << d << " key " << j << ": wrote past row 3";
        EXPECT_EQ(s[j * lds + 5], -1.0f) << "d " << d << " key " << j << ": wrote past row 3";
      }
    }
  }
}

size_t RoundUpTo16(size_t n) { return (n + 15) / 16 * 16; }

// n random codes of the format at k, none of them NaN or Inf.
void FillFiniteCodes(uint8_t* k, size_t n, bool e4m3, std::mt19937* rng) {
  std::uniform_int_distribution<int> code(0, 255);
  for (size_t i = 0; i < n; ++i) {
    uint8_t x = static_cast<uint8_t>(code(*rng));
    while (!std::isfinite(Fp8CodeValue(x, e4m3))) x = static_cast<uint8_t>(code(*rng));
    k[i] = x;
  }
}

// Four bf16 Q rows of d values (d a multiple of 8), rows ldq apart, in
// Fp8QDotK4's block layout: rows 4 d apart.
std::vector<uint16_t> QueryBlocks(const std::vector<uint16_t>& q, size_t ldq, size_t d) {
  std::vector<uint16_t> out(4 * 4 * d);
  for (size_t r = 0; r < 4; ++r)
    x86_dot::Fp8QueryBlocks(q.data() + r * ldq, d, out.data() + r * 4 * d);
  return out;
}

// fp8 through bf16 (FAST). Every code of both formats: one-hot Q rows pick
// each code's value out of a K row exactly (special codes in a row of their
// own: NaN, and E5M2's Inf times 1). Then random rows against double sums
// (exact products, f32 sums), the last key's row ending on a guarded page,
// and key counts that leave a partial group of eight.
// The decode kernels' checks, for a group of 4 query rows (x86_dot.h's
// packed layout); `where` names the case in failure messages. Callers wrap
// them in ASSERT_NO_FATAL_FAILURE.

// Scores s[4 j + r] = scale * sum_{c < d} q(r, c) k(j, c) for j < keys,
// r < 4: products exact, so at most d f32 roundings of partial sums; and
// nothing written at s[4 keys] (holding -7).
template <class QValue, class KValue>
void ExpectPackedScores(const std::vector<float>& s, size_t keys, size_t d, float scale,
                        const QValue& q, const KValue& k, const std::string& where) {
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = 0; r < 4; ++r) {
      double want = 0, abs_sum = 0;
      for (size_t c = 0; c < d; ++c) {
        const double x = double(q(r, c)) * k(j, c);
        want += x;
        abs_sum += std::fabs(x);
      }
      const double bound = scale * d * std::ldexp(abs_sum, -24);
      ASSERT_NEAR(s[4 * j + r], scale * want, bound) << where << " key " << j << " row " << r;
    }
  }
  EXPECT_EQ(s[4 * keys], -7.0f) << where << ": wrote past the last key";
}

// O[r, c] = alpha[r] O0[r, c] + sum_{j < keys} bf16(p[4 j + r]) v(j, c) for
// c < dv, alpha[r] O0[r, c] for c in [dv, dvp): the weights rounded to
// bf16 (nearest even), their products exact, sums in f32.
template <class VValue>
void ExpectWeightedSum(const std::vector<float>& o, const std::vector<float>& o0,
                       const std::vector<float>& p, size_t keys, size_t dv, size_t dvp,
                       const double alpha[4], const VValue& v, const std::string& where) {
  for (size_t r = 0; r < 4; ++r) {
    for (size_t c = 0; c < dvp; ++c) {
      double want = alpha[r] * o0[r * dvp + c], abs_sum = std::fabs(want);
      for (size_t j = 0; c < dv && j < keys; ++j) {
        const double x = double(F32FromBF16(BF16FromF32(p[4 * j + r]))) * v(j, c);
        want += x;
        abs_sum += std::fabs(x);
      }
      ASSERT_NEAR(o[r * dvp + c], want, (keys + 2) * std::ldexp(abs_sum, -24))
          << where << " row " << r << " col " << c;
    }
  }
}

// A NaN or Inf weight (row 2 of the last key) refused, and O (which
// weighted_sum(weights) writes) left as it was.
template <class WeightedSum>
void ExpectNonFiniteWeightsRefused(const std::vector<float>& p, size_t keys,
                                   const std::vector<float>& o, const WeightedSum& weighted_sum,
                                   const std::string& where) {
  for (float bad : {NAN, INFINITY}) {
    std::vector<float> pb = p;
    pb[4 * (keys - 1) + 2] = bad;
    const std::vector<float> before = o;
    EXPECT_FALSE(weighted_sum(pb.data())) << where << ": weight " << bad;
    EXPECT_EQ(o, before) << where << ": a refused call changed O";
  }
}

TEST_F(X86Dot512Test, Fp8QDotK4WidensEveryCodeExactly) {
  if (!x86_dot::HaveFp8BF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16 with AVX512_VBMI";
  const uint16_t one = BF16FromF32(1.0f);
  for (bool e4m3 : {true, false}) {
    const size_t d = 256, ldq = 256;
    std::vector<uint8_t> k(d);
    for (size_t c = 0; c < d; ++c) k[c] = static_cast<uint8_t>(c);
    for (size_t c0 = 0; c0 < d; c0 += 4) {
      std::vector<uint16_t> q(4 * ldq, 0);
      for (size_t r = 0; r < 4; ++r) q[r * ldq + c0 + r] = one;
      // A finite row: the special codes read as 0 (else 0 * NaN poisons all).
      std::vector<uint8_t> finite = k;
      for (uint8_t& x : finite) {
        if (!std::isfinite(Fp8CodeValue(x, e4m3))) x = 0;
      }
      // One key (a padded copy of its row), and the row as 8 keys (a group).
      for (size_t keys : {1, 8}) {
        std::vector<float> s(4 * keys, -1.0f);
        x86_dot::Fp8QDotK4(QueryBlocks(q, ldq, d).data(), 4 * d, finite.data(), 0, d, keys, e4m3,
                           1.0f, s.data(), nullptr, 0, nullptr, 0, 0);
        for (size_t j = 0; j < keys; ++j) {
          for (size_t r = 0; r < 4; ++r) {
            const float want = Fp8CodeValue(finite[c0 + r], e4m3);
            EXPECT_EQ(s[4 * j + r], want) << (e4m3 ? "e4m3" : "e5m2") << " code " << c0 + r;
          }
        }
      }
    }
    // Each special code alone in key 6's row of 9 (zero rows around it): the
    // value itself there, 0 for the other keys (the first group of 8 and
    // the last, which ends at key 8).
    for (int code = 0; code < 256; ++code) {
      const float value = Fp8CodeValue(static_cast<uint8_t>(code), e4m3);
      if (std::isfinite(value)) continue;
      constexpr size_t kKeys = 9, kSpecial = 6;
      std::vector<uint8_t> rows(kKeys * 64, 0);
      rows[kSpecial * 64 + 5] = static_cast<uint8_t>(code);
      std::vector<uint16_t> q(4 * 64, 0);
      for (size_t r = 0; r < 4; ++r) q[r * 64 + 5] = one;
      float s[4 * kKeys];
      x86_dot::Fp8QDotK4(QueryBlocks(q, 64, 64).data(), 4 * 64, rows.data(), 64, 64, kKeys, e4m3,
                         1.0f, s, nullptr, 0, nullptr, 0, 0);
      for (size_t j = 0; j < kKeys; ++j) {
        for (size_t r = 0; r < 4; ++r) {
          if (j != kSpecial) {
            EXPECT_EQ(s[4 * j + r], 0.0f) << "code " << code << " key " << j;
          } else if (std::isnan(value)) {
            EXPECT_TRUE(std::isnan(s[4 * j + r])) << "code " << code;
          } else {
            EXPECT_EQ(s[4 * j + r], value) << "code " << code;
          }
        }
      }
    }
  }
}

TEST_F(X86Dot512Test, Fp8QDotK4MatchesExactProducts) {
  if (!x86_dot::HaveFp8BF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16 with AVX512_VBMI";
  std::mt19937 rng(5);
  for (bool e4m3 : {true, false}) {
    // d: a last 16 codes alone, after 32-code steps, or none, up to
    // kMaxFp8QDotD; keys: fewer than a group of 8 (read from a padded
    // copy), whole groups, and last groups of 1-7 that end at the last key
    // (their first keys recomputed, not stored again).
    for (size_t d : {size_t{16}, size_t{80}, size_t{128}, size_t{576}, x86_dot::kMaxFp8QDotD}) {
      for (size_t keys : {1, 3, 4, 7, 9, 12, 13, 15, 16, 21}) {
        const size_t ldq = d + 8, ldk = d + 5;  // strided K rows
        std::vector<uint16_t> q(4 * ldq, 0);
        for (size_t r = 0; r < 4; ++r) {
          const std::vector<uint16_t> row = RandomBF16(d, &rng);
          std::copy(row.begin(), row.end(), q.begin() + r * ldq);
        }
        // The last key's row ends where an inaccessible page begins.
        GuardedBytes kb((keys - 1) * ldk + d);
        ASSERT_NE(kb.data(), nullptr) << "mmap";
        auto* k = reinterpret_cast<uint8_t*>(kb.data());
        FillFiniteCodes(k, (keys - 1) * ldk + d, e4m3, &rng);
        std::vector<float> s(4 * keys + 4, -7.0f);
        const float scale = 0.25f;
        // Odd key counts with rows prefetched into L1 (as the tile's V) and
        // K rows ahead alone.
        const x86_dot::L1Rows l1{k, ldk, d, keys};
        x86_dot::Fp8QDotK4(QueryBlocks(q, ldq, d).data(), 4 * d, k, ldk, d, keys, e4m3, scale,
                           s.data(), k, ldk, keys % 2 == 1 ? nullptr : k, ldk, keys,
                           keys % 2 == 1 ? l1 : x86_dot::L1Rows{});
        ASSERT_NO_FATAL_FAILURE(ExpectPackedScores(
            s, keys, d, scale, [&](size_t r, size_t c) { return F32FromBF16(q[r * ldq + c]); },
            [&](size_t j, size_t c) { return Fp8CodeValue(k[j * ldk + c], e4m3); },
            "d " + std::to_string(d) + " keys " + std::to_string(keys)));
      }
    }
  }
}

// fp8 on f32 FMAs: Q rows carry 2^bias (Fp8Folded), so a score is the sum
// of Q times each code's value. Every finite code of both formats through
// one-hot Q rows (exactly its value), in a group of four keys and alone
// (a last group of one), with d a multiple of 16 and with a masked tail.
TEST_F(X86Dot512Test, Fp8FmaQDotK4WidensEveryFiniteCodeExactly) {
  if (!x86_dot::HaveFp8FmaDot()) GTEST_SKIP() << "this CPU has no AVX-512";
  for (bool e4m3 : {true, false}) {
    const float two_to_bias = e4m3 ? 0x1p120f : 0x1p112f;
    for (size_t d : {size_t{256}, size_t{260}}) {
      std::vector<uint8_t> k(d);
      for (size_t c = 0; c < d; ++c) {
        const uint8_t x = static_cast<uint8_t>(c);
        k[c] = std::isfinite(Fp8CodeValue(x, e4m3)) ? x : 0;  // d 260: codes 0-3 again
      }
      const size_t ldq = RoundUpTo16(d);
      for (size_t c0 = 0; c0 < d; c0 += 4) {
        std::vector<float> q(4 * ldq, 0.0f);
        for (size_t r = 0; r < 4 && c0 + r < d; ++r) q[r * ldq + c0 + r] = two_to_bias;
        for (size_t keys : {1, 4}) {  // the same row for every key
          std::vector<float> s(4 * keys, -1.0f);
          x86_dot::Fp8FmaQDotK4(q.data(), ldq, k.data(), 0, d, keys, e4m3, s.data(), nullptr, 0,
                                nullptr, 0, 0);
          for (size_t j = 0; j < keys; ++j) {
            for (size_t r = 0; r < 4 && c0 + r < d; ++r) {
              EXPECT_EQ(s[4 * j + r], Fp8CodeValue(k[c0 + r], e4m3))
                  << (e4m3 ? "e4m3" : "e5m2") << " d " << d << " code " << int{k[c0 + r]};
            }
          }
        }
      }
    }
  }
}

// Random f32 Q rows and finite codes against double sums (exact products,
// f32 sums): d with and without a tail of fewer than 16 codes, written-out
// and looped steps; key counts with last groups of 1-3 keys (nothing
// written past the last); strided K rows, the last ending where an
// inaccessible page begins; the prefetch arguments of both schedules.
TEST_F(X86Dot512Test, Fp8FmaQDotK4MatchesExactProducts) {
  if (!x86_dot::HaveFp8FmaDot()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (bool e4m3 : {true, false}) {
    const float two_to_bias = e4m3 ? 0x1p120f : 0x1p112f;
    for (size_t d : {size_t{8}, size_t{16}, size_t{72}, size_t{128}, size_t{130}, size_t{200},
                     size_t{256}, size_t{576}, x86_dot::kMaxFp8QDotD}) {
      for (size_t keys : {1, 2, 3, 4, 5, 7, 8, 13}) {
        const size_t ldq = RoundUpTo16(d) + 16, ldk = d + 5;
        std::vector<float> q(4 * ldq, 0.0f);
        for (size_t r = 0; r < 4; ++r) {
          for (size_t c = 0; c < d; ++c) q[r * ldq + c] = value(rng) * two_to_bias;
        }
        GuardedBytes kb((keys - 1) * ldk + d);
        ASSERT_NE(kb.data(), nullptr) << "mmap";
        auto* k = reinterpret_cast<uint8_t*>(kb.data());
        FillFiniteCodes(k, (keys - 1) * ldk + d, e4m3, &rng);
        std::vector<float> s(4 * keys + 4, -7.0f);
        // Odd key counts: K rows ahead into L2 alone, rows into L1; even:
        // K and V rows ahead into L2.
        const x86_dot::L1Rows l1{k, ldk, d, keys};
        x86_dot::Fp8FmaQDotK4(q.data(), ldq, k, ldk, d, keys, e4m3, s.data(), k, ldk,
                              keys % 2 == 1 ? nullptr : k, ldk, keys,
                              keys % 2 == 1 ? l1 : x86_dot::L1Rows{});
        ASSERT_NO_FATAL_FAILURE(ExpectPackedScores(
            s, keys, d, 1.0f, [&](size_t r, size_t c) { return q[r * ldq + c]; },
            [&](size_t j, size_t c) {
              return std::ldexp(double{Fp8CodeValue(k[j * ldk + c], e4m3)}, e4m3 ? -120 : -112);
            },
            "d " + std::to_string(d) + " keys " + std::to_string(keys)));
      }
    }
  }
}

// P.V: each weight rounded to bf16 (nearest even), its products with the
// codes exact, sums in f32; alpha, columns [dv, dvp) only rescaled, an odd
// key count (the extra key's weight 0), the last row on a guarded page; a
// NaN or Inf weight refused with O untouched.
TEST_F(X86Dot512Test, Fp8WeightedSumV4MatchesRoundedWeights) {
  if (!x86_dot::HaveFp8BF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16 with AVX512_VBMI";
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (bool e4m3 : {true, false}) {
    for (size_t dv : {16, 80, 128, 512}) {
      for (size_t keys : {1, 2, 9, 32}) {
        const size_t dvp = (dv + 15) / 16 * 16 + (dv == 80 ? 16 : 0), ldv = dv + 3;
        GuardedBytes vb(keys * ldv);
        ASSERT_NE(vb.data(), nullptr) << "mmap";
        auto* vbytes = reinterpret_cast<uint8_t*>(vb.data());
        FillFiniteCodes(vbytes, keys * ldv, e4m3, &rng);
        // The last row starts dv bytes before the guard page.
        std::vector<const uint8_t*> rows(keys + 1);
        for (size_t j = 0; j < keys; ++j) rows[j] = vbytes + j * ldv;
        rows[keys - 1] = vbytes + keys * ldv - dv;
        rows[keys] = rows[keys - 1];
        std::vector<float> p((keys + 3) / 4 * 16, 0.0f);
        for (size_t i = 0; i < 4 * keys; ++i) p[i] = u01(rng) * 0.01f;
        const float alpha[4] = {0.5f, 1.0f, 0.25f, 0.0f};
        std::vector<float> o(4 * dvp), o0(4 * dvp);
        for (float& x : o) x = u01(rng);
        o0 = o;
        // Some with the first rows prefetched into L1 (as the V rows ahead).
        const x86_dot::L1Rows l1{vbytes, ldv, dv, keys - 1};
        const x86_dot::L1Rows some = keys > 2 ? l1 : x86_dot::L1Rows{};
        ASSERT_TRUE(x86_dot::Fp8WeightedSumV4(p.data(), keys, rows.data(), dv, dvp, e4m3, alpha,
                                              o.data(), dvp, some));
        const std::string where = "dv " + std::to_string(dv) + " keys " + std::to_string(keys);
        const double alpha_d[4] = {alpha[0], alpha[1], alpha[2], alpha[3]};
        ASSERT_NO_FATAL_FAILURE(ExpectWeightedSum(
            o, o0, p, keys, dv, dvp, alpha_d,
            [&](size_t j, size_t c) { return Fp8CodeValue(rows[j][c], e4m3); }, where));
        ExpectNonFiniteWeightsRefused(
            p, keys, o,
            [&](const float* pb) {
              return x86_dot::Fp8WeightedSumV4(pb, keys, rows.data(), dv, dvp, e4m3, alpha,
                                               o.data(), dvp, some);
            },
            where);
      }
    }
  }
}

// The bf16 decode kernels: Q.K of bf16 Q rows (zero past d up to 32
// values) against bf16 K rows, products exact, sums f32; keys in fours and
// one by one; d a whole number of 32-value steps or not; the last K row
// ending on a guarded page; the prefetch arguments in their forms.
TEST_F(X86Dot512Test, BF16QDotK4MatchesExactProducts) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(7);
  for (size_t d : {16, 48, 64, 80, 128, 576}) {
    for (size_t keys : {1, 3, 4, 5, 8, 13, 64}) {
      // Q rows padded with zeros to 32 values exactly, the last ending where
      // an inaccessible page begins; strided K rows.
      const size_t ldq = (d + 31) / 32 * 32, ldk = d + 6;
      GuardedBytes qb(2 * 4 * ldq);
      ASSERT_NE(qb.data(), nullptr) << "mmap";
      auto* qrows = reinterpret_cast<uint16_t*>(qb.data());
      std::fill(qrows, qrows + 4 * ldq, uint16_t{0});
      for (size_t r = 0; r < 4; ++r) {
        const std::vector<uint16_t> row = RandomBF16(d, &rng);
        std::copy(row.begin(), row.end(), qrows + r * ldq);
      }
      const std::vector<uint16_t> q(qrows, qrows + 4 * ldq);
      const size_t k_values = (keys - 1) * ldk + d;
      GuardedBytes kb(2 * k_values);
      ASSERT_NE(kb.data(), nullptr) << "mmap";
      auto* k = reinterpret_cast<uint16_t*>(kb.data());
      const std::vector<uint16_t> kv = RandomBF16(k_values, &rng);
      std::copy(kv.begin(), kv.end(), k);
      std::vector<float> s(4 * keys + 4, -7.0f);
      const float scale = 0.125f;  // a power of two: the product is exact
      const x86_dot::L1Rows l1{reinterpret_cast<const uint8_t*>(k), 2 * ldk, 2 * d, keys};
      x86_dot::BF16QDotK4(qrows, ldq, k, ldk, d, keys, scale, s.data(), k, ldk,
                          keys % 2 == 1 ? nullptr : k, ldk, keys,
                          keys % 2 == 1 ? l1 : x86_dot::L1Rows{});
      ASSERT_NO_FATAL_FAILURE(ExpectPackedScores(
          s, keys, d, scale, [&](size_t r, size_t c) { return F32FromBF16(q[r * ldq + c]); },
          [&](size_t j, size_t c) { return F32FromBF16(k[j * ldk + c]); },
          "d " + std::to_string(d) + " keys " + std::to_string(keys)));
    }
  }
}

// A key's score has the same bits wherever it falls in a call: in a group
// of four or among the last keys, as when a run of paged rows ends between
// multiples of four (paged equals dense bit for bit).
TEST_F(X86Dot512Test, BF16QDotK4ScoresDoNotDependOnTheKeysPosition) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(9);
  const size_t d = 128, ldq = 128, keys = 13;
  std::vector<uint16_t> q = RandomBF16(4 * ldq, &rng);
  const std::vector<uint16_t> k = RandomBF16(keys * d, &rng);
  std::vector<float> whole(4 * keys);
  x86_dot::BF16QDotK4(q.data(), ldq, k.data(), d, d, keys, 0.125f, whole.data(), nullptr, 0,
                      nullptr, 0, 0);
  for (size_t cut = 1; cut < keys; ++cut) {
    std::vector<float> parts(4 * keys);
    x86_dot::BF16QDotK4(q.data(), ldq, k.data(), d, d, cut, 0.125f, parts.data(), nullptr, 0,
                        nullptr, 0, 0);
    x86_dot::BF16QDotK4(q.data(), ldq, k.data() + cut * d, d, d, keys - cut, 0.125f,
                        parts.data() + 4 * cut, nullptr, 0, nullptr, 0, 0);
    for (size_t i = 0; i < 4 * keys; ++i) {
      ASSERT_EQ(std::memcmp(&parts[i], &whole[i], sizeof(float)), 0)
          << "cut " << cut << " key " << i / 4 << " row " << i % 4 << ": " << parts[i] << " vs "
          << whole[i];
    }
  }
}

// P.V against bf16 V rows: each weight rounded to bf16 (nearest even), its
// products exact, sums in f32; alpha, columns [dv, dvp) only rescaled,
// column blocks of 64 whole, half or in part, an odd key count (the extra
// key's weight 0), the last row on a guarded page; a NaN or Inf weight
// refused with O untouched.
TEST_F(X86Dot512Test, BF16WeightedSumV4MatchesRoundedWeights) {
  if (!x86_dot::HaveBF16Dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (size_t dv : {16, 48, 80, 96, 128, 512}) {
    for (size_t keys : {1, 2, 9, 32, 64}) {
      const size_t dvp = dv + (dv == 80 ? 32 : 0), ldv = dv + 3;
      GuardedBytes vb(2 * keys * ldv);
      ASSERT_NE(vb.data(), nullptr) << "mmap";
      auto* values = reinterpret_cast<uint16_t*>(vb.data());
      const std::vector<uint16_t> vv = RandomBF16(keys * ldv, &rng);
      std::copy(vv.begin(), vv.end(), values);
      // The last row starts dv values before the guard page.
      std::vector<const uint16_t*> rows(keys + 1);
      for (size_t j = 0; j < keys; ++j) rows[j] = values + j * ldv;
      rows[keys - 1] = values + keys * ldv - dv;
      rows[keys] = rows[keys - 1];
      // Weights past the last key that must not be read (the softmax leaves
      // them as they were): an odd last key's pair takes 0, not them.
      std::vector<float> p((keys + 3) / 4 * 16, NAN);
      for (size_t i = 0; i < 4 * keys; ++i) p[i] = u01(rng) * 0.01f;
      const float alpha[4] = {0.5f, 1.0f, 0.25f, 0.0f};
      std::vector<float> o(4 * dvp), o0(4 * dvp);
      for (float& x : o) x = u01(rng);
      o0 = o;
      const x86_dot::L1Rows l1{reinterpret_cast<const uint8_t*>(values), 2 * ldv, 2 * dv, keys - 1};
      const x86_dot::L1Rows some = keys > 2 ? l1 : x86_dot::L1Rows{};
      ASSERT_TRUE(x86_dot::BF16WeightedSumV4(p.data(), keys, rows.data(), dv, dvp,
                                             keys == 9 ? nullptr : alpha, o.data(), dvp, some));
      const std::string where = "dv " + std::to_string(dv) + " keys " + std::to_string(keys);
      const double ones[4] = {1.0, 1.0, 1.0, 1.0};
      const double alpha_d[4] = {alpha[0], alpha[1], alpha[2], alpha[3]};
      ASSERT_NO_FATAL_FAILURE(ExpectWeightedSum(
          o, o0, p, keys, dv, dvp, keys == 9 ? ones : alpha_d,
          [&](size_t j, size_t c) { return F32FromBF16(rows[j][c]); }, where));
      ExpectNonFiniteWeightsRefused(
          p, keys, o,
          [&](const float* pb) {
            return x86_dot::BF16WeightedSumV4(pb, keys, rows.data(), dv, dvp, alpha, o.data(), dvp,
                                              some);
          },
          where);
    }
  }
}

}  // namespace
}  // namespace attnkit

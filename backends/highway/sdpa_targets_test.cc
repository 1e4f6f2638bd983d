// The flash kernels under every compiled Highway target this CPU supports
// (not only the best), against the fp64 reference on a representative grid.
#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "backends/highway/flash_test_util.h"
#include "backends/highway/highway_backend.h"
#include "backends/highway/sdpa.h"
#include "backends/highway/x86_dot.h"
#include "harness/problem_data.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

class FlashTargetTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(FlashTargetTest);

TEST_P(FlashTargetTest, GridMatchesReference) {
  // No forced target: the backend dispatches through HWY_DYNAMIC_DISPATCH,
  // which follows SetSupportedTargetsForTest(GetParam()).
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const std::string want = std::string("flash/") + hwy::TargetName(GetParam()) + " ";
  for (const AttentionProblem& p : TestGrid(/*small=*/true)) {
    std::string kernel;
    const absl::Status s = CheckAgainstReference(backend, p, &kernel);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(kernel.rfind(want, 0), 0u) << kernel << " wanted " << want;
  }
}

// The direct decode path (packed score tiles on every target but scalar).
TEST_P(FlashTargetTest, DecodeTilesMatchReference) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  for (const AttentionProblem& p : DecodeTileGrid()) {
    const absl::Status s = CheckAgainstReference(backend, p);
    EXPECT_TRUE(s.ok()) << p.Id() << ": " << s;
  }
}

// int8 K/V decode under FAST (4 query rows per kv head, keys that fill no
// whole tile, last tiles of 1 and 2 keys past a quad, dv = 80 ending
// mid-block) against the oracle,
// and the products it ran: vpdpbusd Q.K and the u8-weight P.V (vpdpbusd)
// where the target and CPU allow (AVX-512 targets with AVX512_VNNI, AVX2
// with AVX-VNNI); f32 products of the widened values otherwise.
TEST_P(FlashTargetTest, Int8FastDecodeMatchesTheOracle) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const int64_t target = GetParam();
  std::string want = "";
  if (target == HWY_AVX2 && x86_dot::HaveAvxVnni()) {
    want = " qk=int8avxvnni pv=u8avxvnni";
  } else if (target <= HWY_AVX3 && x86_dot::HaveVnni()) {
    want = " qk=int8vnni pv=u8vnni";
  } else if (target == HWY_AVX2) {
    std::cout << "not checking the AVX2 kernel's products: this CPU has no AVX-VNNI\n";
  }
  for (int64_t d : {128, 80}) {
    for (int64_t kv_len : {301, 302, 45, 46}) {  // last tiles of 45 and 46 keys
      AttentionProblem p = MakeTestProblem(2, 8, 2, 1, kv_len, d);
      p.kv_dtype = DType::kI8;
      p.compute = ComputeMode::kFast;
      p.return_lse = true;
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 5);
      ASSERT_TRUE(data.ok()) << data.status();
      RunInfo info;
      const absl::Status s = backend->Forward(p, data->args(), &info);
      ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
      const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
      EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
      if (!want.empty()) {
        EXPECT_NE(info.kernel.find(want), std::string::npos) << info.kernel << " wanted " << want;
      } else {
        EXPECT_EQ(info.kernel.find("qk=int8"), std::string::npos) << info.kernel;
      }
    }
  }
}

// A decode of two query rows per head (causal, bottom-right: the first
// never sees the last key), B2 H8/4, over kv_len keys of type kv, with its
// LSE: the shape of the fp8 and bf16 decode-tile tests below.
AttentionProblem TwoRowDecode(DType kv, ComputeMode mode, int64_t kv_len, int64_t d) {
  AttentionProblem p = MakeTestProblem(2, 8, 4, 2, kv_len, d);
  p.kv_dtype = kv;
  p.compute = mode;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.return_lse = true;
  return p;
}

// Subnormal bf16 values in every 16th key of K and V from key `first` on
// (K's at column j % d, V's at (j + v_shift) % d): the bf16 dot products
// read them as 0 (the oracle's MayFlushBF16Products).
void PlantSubnormalKV(const AttentionProblem& p, const AttentionArgs& a, int64_t first,
                      int64_t v_shift) {
  auto* k = static_cast<uint16_t*>(a.k.data);
  auto* v = static_cast<uint16_t*>(a.v.data);
  const int64_t d = p.head_dim;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.num_kv_heads; ++g) {
      for (int64_t j = first; j < p.kv_len; j += 16) {
        k[a.k.Offset(b, g, j, j % d)] = static_cast<uint16_t>(1 + j % 5);
        v[a.v.Offset(b, g, j, (j + v_shift) % d)] = static_cast<uint16_t>(0x8000 | (1 + j % 7));
      }
    }
  }
}

// fp8 decode tiles take one of four reads (sdpa-inl.h): the 2^bias
// folded into Q and the V scales, the 2^bias multiplied in where a factor
// could overflow (|q| >= 2^7, a V scale >= 2^7), and where a tile holds a
// special code or many subnormal ones (the tile runs again) E4M3's
// subnormal codes alone through f16 with 2^8 folded (x86 from AVX2 up),
// the rest decoded, NaN and Inf built. Each against the oracle, in both
// formats: batch 0's queries times 4000 (scaled, up to 354), two V rows'
// scales 500, a few subnormal codes in every tile (taken as they are),
// many in the tiles of keys 64-191 of one KV head's K and another's V
// (so those tiles run again: Fp8RowsNeedDecoding), and a
// special code (E4M3 NaN; E5M2 Inf, NaN) in the last key of one head's K
// and another's V. Two query rows per head (causal): the first never sees
// the last key, so it checks the rerun tile's finite output, the second
// comes out NaN. Under FAST the same, and on AVX-512 targets of a CPU with
// AVX512_BF16 and VBMI that prefer vdpbf16ps to FMAs (PreferBF16Dot) the
// codes widened to bf16 (Fp8QDotK4, and Fp8WeightedSumV4 but in the tiles
// with the special V code); on AVX-512 targets of the other CPUs (EXACT
// and FAST), Q.K by Fp8FmaQDotK4 in the tiles whose Q and V scales fold
// (f32 FMAs on the codes widened as Fp8Folded).
TEST_P(FlashTargetTest, Fp8DecodeTilesMatchTheOracle) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const bool bf16_codes =
      GetParam() <= HWY_AVX3 && x86_dot::HaveFp8BF16Dot() && x86_dot::PreferBF16Dot();
  const bool fma_codes =
      GetParam() <= HWY_AVX3 && x86_dot::HaveFp8FmaDot() && !x86_dot::PreferBF16Dot();
  for (const auto [kv, mode] : {std::pair{DType::kF8E4M3, ComputeMode::kExact},
                                {DType::kF8E5M2, ComputeMode::kExact},
                                {DType::kF8E4M3, ComputeMode::kFast},
                                {DType::kF8E5M2, ComputeMode::kFast}}) {
    const bool e4m3 = kv == DType::kF8E4M3;
    const uint8_t mantissa = e4m3 ? 0x07 : 0x03;  // S.0...0.m: subnormal codes
    for (int64_t d : {128, 64}) {
      const AttentionProblem p = TwoRowDecode(kv, mode, 301, d);
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 11);
      ASSERT_TRUE(data.ok()) << data.status();
      const AttentionArgs& a = data->args();
      auto* q = static_cast<float*>(a.q.data);
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < p.q_len; ++i) {
          for (int64_t c = 0; c < d; ++c) q[a.q.Offset(0, h, i, c)] *= 4000.0f;
        }
      }
      auto* v_scale = static_cast<float*>(a.v_scale.data);
      v_scale[a.v_scale.Offset(1, 2, 40)] = 500.0f;
      v_scale[a.v_scale.Offset(0, 1, 200)] = 500.0f;
      auto* k = static_cast<uint8_t*>(a.k.data);
      auto* v = static_cast<uint8_t*>(a.v.data);
      for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t g = 0; g < p.num_kv_heads; ++g) {
          for (int64_t j = 3; j < p.kv_len; j += 16) {
            k[a.k.Offset(b, g, j, j % d)] = static_cast<uint8_t>(1 + j % mantissa);
            v[a.v.Offset(b, g, j, (j + 5) % d)] = static_cast<uint8_t>(0x80 | (1 + j % mantissa));
          }
        }
      }
      // 16 subnormal codes a row (more than kFp8SubnormalCodesFolded a tile).
      for (int64_t j = 64; j < 192; ++j) {
        for (int64_t c = 0; c < 16; ++c) {
          k[a.k.Offset(1, 1, j, c)] = static_cast<uint8_t>(1 + (j + c) % mantissa);
          v[a.v.Offset(0, 2, j, 20 + c)] = static_cast<uint8_t>(0x80 | (1 + (j * c) % mantissa));
        }
      }
      const int64_t last = p.kv_len - 1;
      k[a.k.Offset(1, 0, last, 7)] = e4m3 ? 0x7F : 0x7C;  // NaN; +Inf
      v[a.v.Offset(0, 3, last, 9)] = e4m3 ? 0xFF : 0xFE;  // NaN
      // And one in a tile whose Q and V scales fold (Fp8FmaQDotK4's).
      v[a.v.Offset(1, 2, last, 11)] = e4m3 ? 0x7F : 0x7E;  // NaN
      RunInfo info;
      const absl::Status s = backend->Forward(p, a, &info);
      ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
      const Comparison c = CompareToReference(p, a, ComputeReference(p, a));
      EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
      // The special codes' heads' second rows: 2 heads per KV head, 3 KV heads.
      EXPECT_EQ(c.poisoned_rows, 6) << p.Id();
      const bool fp8_dots = info.kernel.find("qk=fp8bf16dot") != std::string::npos;
      EXPECT_EQ(fp8_dots, bf16_codes && mode == ComputeMode::kFast) << info.kernel;
      const bool fma_dots = info.kernel.find("qk=fp8fma") != std::string::npos;
      EXPECT_EQ(fma_dots, fma_codes) << info.kernel;
    }
  }
}

// Which fp8 decode tiles the folded reads hand back, and how they run: on
// x86 targets from AVX2 up, where the folded reads would take a microcode
// assist per subnormal code, a tile with more than 8 subnormal codes in K
// (checked before Q.K) or in V (after it) runs through f16 where it is
// E4M3 with no special code (Fp8TilesRunHalf), decoded otherwise
// (Fp8TilesRunDecoded: E5M2, or a NaN code beside them); none is handed
// back where the rows hold the random inputs' few subnormal codes (their
// own scale per row) or 8 a tile, nor on SSE4 (whose decoding makes the
// same f32 subnormals), nor where the codes are widened to bf16 by tables
// (AMD under FAST: no folded reads). Each run against the oracle too.
TEST_P(FlashTargetTest, Fp8TilesHandedBackRunThroughF16OrDecoded) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const bool counts = GetParam() <= HWY_AVX2;
  const bool folded_reads = GetParam() != HWY_SCALAR;  // (kHavePackedScores)
  const bool bf16_codes =
      GetParam() <= HWY_AVX3 && x86_dot::HaveFp8BF16Dot() && x86_dot::PreferBF16Dot();
  for (const auto& [kv, mode] : {std::pair{DType::kF8E4M3, ComputeMode::kExact},
                                 {DType::kF8E5M2, ComputeMode::kFast},
                                 {DType::kF8E4M3, ComputeMode::kFast}}) {
    const uint8_t mantissa = kv == DType::kF8E4M3 ? 0x07 : 0x03;
    // Subnormal codes planted in the first 16 keys of the tiles at keys 64
    // and 128 (16-key tiles under EXACT, 64 under FAST) of KV head 1 of
    // batch 1: none, 8 (in K), 9 (in K), 9 (in V), 9 (in K) and a NaN code
    // in the V row of the tile's first key, a tile; the random inputs' own
    // codes of exponent 0 made normal first.
    struct Planting {
      int64_t subnormal;
      bool in_k;
      bool nan;
    };
    for (const Planting& plant : {Planting{0, true, false},
                                  {8, true, false},
                                  {9, true, false},
                                  {9, false, false},
                                  {9, true, true}}) {
      const AttentionProblem p = TwoRowDecode(kv, mode, 301, 128);
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 17);
      ASSERT_TRUE(data.ok()) << data.status();
      const AttentionArgs& a = data->args();
      const uint8_t exponent_bits = kv == DType::kF8E4M3 ? 0x78 : 0x7C;
      const uint8_t exponent_one = kv == DType::kF8E4M3 ? 0x08 : 0x04;
      for (const TensorView* t : {&a.k, &a.v}) {
        auto* all = static_cast<uint8_t*>(t->data);
        for (int64_t i = 0; i < t->NumElements(); ++i) {
          if ((all[i] & exponent_bits) == 0) all[i] |= exponent_one;
        }
      }
      const TensorView& rows = plant.in_k ? a.k : a.v;
      auto* codes = static_cast<uint8_t*>(rows.data);
      for (int64_t j : {64, 128}) {
        for (int64_t i = 0; i < plant.subnormal; ++i) {  // one a row
          codes[rows.Offset(1, 1, j + i, 3 * i)] = static_cast<uint8_t>(1 + i % mantissa);
        }
        if (plant.nan) static_cast<uint8_t*>(a.v.data)[a.v.Offset(1, 1, j, 5)] = 0x7F;
      }
      const int64_t decoded_before = Fp8TilesRunDecoded(), half_before = Fp8TilesRunHalf();
      RunInfo info;
      const absl::Status s = backend->Forward(p, a, &info);
      ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
      const int64_t decoded = Fp8TilesRunDecoded() - decoded_before;
      const int64_t half = Fp8TilesRunHalf() - half_before;
      const bool handed_back = ((counts && plant.subnormal > 8) || (plant.nan && folded_reads)) &&
                               !(bf16_codes && mode == ComputeMode::kFast);
      const bool want_half = handed_back && counts && kv == DType::kF8E4M3 && !plant.nan;
      const std::string where = p.Id() + " planted " + std::to_string(plant.subnormal) +
                                (plant.in_k ? " in K" : " in V") + (plant.nan ? " and a NaN" : "");
      EXPECT_EQ(half > 0, want_half)
          << where << ": " << half << " tiles through f16, kernel " << info.kernel;
      EXPECT_EQ(decoded > 0, handed_back && !want_half)
          << where << ": " << decoded << " tiles decoded, kernel " << info.kernel;
      const Comparison c = CompareToReference(p, a, ComputeReference(p, a));
      EXPECT_TRUE(c.ok()) << where << ": " << c.first_failure;
      if (plant.nan) EXPECT_GT(c.poisoned_rows, 0) << where;
    }
  }
}

// bf16 K/V decode tiles against the oracle, for f32 and bf16 Q under EXACT
// and FAST: two query rows per head (causal, bottom-right: the first never
// sees the last key), subnormal bf16 values in K and V in every 16 keys
// (which vdpbf16ps reads as 0: the oracle's MayFlushBF16Products), a NaN
// in the last key of one head's K and of another's V (their heads' second
// rows come out NaN; those tiles' P.V takes the f32 products), d 128 and
// 80 (a last K step of 16 values, a last V block of 16 columns), last
// tiles of 5 and 6 keys. Under FAST, on AVX-512 targets of a CPU with
// AVX512_BF16 that prefers it to FMAs (PreferBF16Dot), bf16 products
// (BF16QDotK4, BF16WeightedSumV4); f32 products otherwise.
TEST_P(FlashTargetTest, BF16DecodeTilesMatchTheOracle) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const bool bf16_dots = GetParam() <= HWY_AVX3 && x86_dot::PreferBF16Dot();
  for (const DType q_type : {DType::kF32, DType::kBF16}) {
    for (const ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
      for (int64_t d : {128, 80}) {
        for (int64_t kv_len : {293, 294}) {
          AttentionProblem p = TwoRowDecode(DType::kBF16, mode, kv_len, d);
          p.dtype = q_type;
          absl::StatusOr<ProblemData> data = ProblemData::Random(p, 13);
          ASSERT_TRUE(data.ok()) << data.status();
          const AttentionArgs& a = data->args();
          PlantSubnormalKV(p, a, /*first=*/3, /*v_shift=*/5);
          auto* k = static_cast<uint16_t*>(a.k.data);
          auto* v = static_cast<uint16_t*>(a.v.data);
          const int64_t last = p.kv_len - 1;
          k[a.k.Offset(1, 0, last, 7)] = 0x7FC0;  // NaN
          v[a.v.Offset(0, 3, last, 9)] = 0xFFC0;  // NaN
          RunInfo info;
          const absl::Status s = backend->Forward(p, a, &info);
          ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
          const Comparison c = CompareToReference(p, a, ComputeReference(p, a));
          EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
          // 2 heads per KV head, 2 KV heads poisoned, their second rows.
          EXPECT_EQ(c.poisoned_rows, 4) << p.Id();
          const bool fast = mode == ComputeMode::kFast;
          const bool qk = info.kernel.find("qk=bf16dot4") != std::string::npos;
          const bool pv = info.kernel.find("pv=bf16dot4") != std::string::npos;
          EXPECT_EQ(qk, bf16_dots && fast) << p.Id() << " " << info.kernel;
          EXPECT_EQ(pv, bf16_dots && fast) << p.Id() << " " << info.kernel;
        }
      }
    }
  }
}

// All-bf16 prefill (GQA, causal from the bottom right, Tq 37 over Tk 100:
// tiles that end inside a block of 16 keys; a window of 21 keys back: key
// runs that start anywhere), dense and in pages of 16 keys, under EXACT
// and FAST, d 128 and 96 (multiples of 32) and 80, with subnormal K and V
// values in every 16 keys, against the oracle, and the products it ran: on
// AVX-512 targets of a CPU with AMX, tdpbf16ps where d is a multiple of 32
// (AmxQDotK; under FAST also AmxWeightedSumV), vdpbf16ps otherwise where
// the CPU prefers it to FMAs (PreferBF16Dot), f32 products elsewhere.
TEST_P(FlashTargetTest, BF16PrefillTilesMatchTheOracle) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const bool bf16_dots = GetParam() <= HWY_AVX3 && x86_dot::PreferBF16Dot();
  const bool amx = GetParam() <= HWY_AVX3 && x86_dot::HaveBF16Dot() && x86_dot::HaveAmxBF16();
  for (const ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
    for (int64_t d : {128, 96, 80}) {
      for (const auto& [page, window] :
           {std::pair<int64_t, bool>{0, false}, {16, false}, {0, true}, {16, true}}) {
        AttentionProblem p = MakeTestProblem(2, 8, 2, 37, 100, d);
        p.dtype = p.kv_dtype = DType::kBF16;
        p.compute = mode;
        p.mask = window ? MaskKind::kSlidingWindow : MaskKind::kCausal;
        p.window_left = window ? 21 : 0;
        p.alignment = Alignment::kBottomRight;
        p.scale = 0.125f;
        if (page > 0) {
          p.page_size = page;
          p.num_pages = p.batch * p.max_pages() + 3;
        }
        absl::StatusOr<ProblemData> data = ProblemData::Random(p, 17);
        ASSERT_TRUE(data.ok()) << data.status();
        const AttentionArgs& a = data->args();
        PlantSubnormalKV(p, a, /*first=*/5, /*v_shift=*/3);
        RunInfo info;
        const absl::Status s = backend->Forward(p, a, &info);
        ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
        const Comparison c = CompareToReference(p, a, ComputeReference(p, a));
        EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
        const bool fast = mode == ComputeMode::kFast, tiles = amx && d % 32 == 0;
        const std::vector<std::string> words = absl::StrSplit(info.kernel, ' ');
        auto has = [&words](const char* word) {
          return std::find(words.begin(), words.end(), word) != words.end();
        };
        EXPECT_EQ(has("qk=bf16amx"), tiles) << p.Id() << " " << info.kernel;
        EXPECT_EQ(has("pv=bf16amx"), tiles && fast) << p.Id() << " " << info.kernel;
        EXPECT_EQ(has("qk=bf16dot"), bf16_dots && !tiles) << p.Id() << " " << info.kernel;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit

// Arguments to kernel parameters, on the CPU: strides of both layouts, the
// GQA packing, scale, masks, optional tensors and the vector-load rules;
// paged pools and block tables, int8 scales, and the per-sequence launches
// of a ragged batch.
#include "backends/cuda/params.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "core/kv_rows.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace cuda {
namespace {

AttentionProblem Gqa(Layout layout, DType dtype, DType kv_dtype) {
  AttentionProblem p;
  p.batch = 2;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.model_dim = 512;
  p.q_len = 5;
  p.kv_len = 9;
  p.dtype = dtype;
  p.kv_dtype = kv_dtype;
  p.layout = layout;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.scale = 0.125f;
  p.name = p.Id();
  return p;
}

TEST(MakeFlashParamsTest, CanonicalLayout) {
  const AttentionProblem p = Gqa(Layout::kBHTD, DType::kBF16, DType::kBF16);
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->q, data->q.data());
  EXPECT_EQ(f->o, data->o.data());
  EXPECT_EQ(f->q_stride.b, 8 * 5 * 64);
  EXPECT_EQ(f->q_stride.h, 5 * 64);
  EXPECT_EQ(f->q_stride.t, 64);
  EXPECT_EQ(f->q_stride.c, 1);
  EXPECT_EQ(f->k_stride.b, 2 * 9 * 64);
  EXPECT_EQ(f->k_stride.h, 9 * 64);
  EXPECT_EQ(f->group_size, 4);
  EXPECT_EQ(f->rows_per_kv_head, 4 * 5);
  EXPECT_EQ(f->compute, ComputeKind::kBF16);
  EXPECT_EQ(f->q_type, ElemType::kBF16);
  EXPECT_FLOAT_EQ(f->scale, 0.125f);
  EXPECT_EQ(f->softcap, 0.0f);
  EXPECT_EQ(f->mask.right, 0);
  EXPECT_EQ(f->mask.left, -1);
  EXPECT_TRUE(f->mask.bottom_right);
  EXPECT_EQ(f->mask.q_len, 5);
  EXPECT_TRUE(f->q_vec && f->k_vec && f->v_vec);
  EXPECT_EQ(f->lse, nullptr);
  EXPECT_EQ(f->kv_lengths, nullptr);
  EXPECT_EQ(f->blocked_mask, nullptr);
  EXPECT_EQ(f->bias, nullptr);
  EXPECT_EQ(f->num_splits, 1);
}

TEST(MakeFlashParamsTest, TokenMajorLayoutNeedsNoCopy) {
  const AttentionProblem p = Gqa(Layout::kBTHD, DType::kF16, DType::kF16);
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->q_stride.b, 5 * 8 * 64);
  EXPECT_EQ(f->q_stride.h, 64);
  EXPECT_EQ(f->q_stride.t, 8 * 64);
  EXPECT_EQ(f->k_stride.h, 64);
  EXPECT_EQ(f->k_stride.t, 2 * 64);
  EXPECT_EQ(f->o_stride.t, 8 * 64);
  EXPECT_EQ(f->compute, ComputeKind::kF16);
  EXPECT_TRUE(f->q_vec);
}

TEST(MakeFlashParamsTest, MixedTypesComputeInF32) {
  const AttentionProblem p = Gqa(Layout::kBHTD, DType::kF32, DType::kBF16);
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->compute, ComputeKind::kF32);
  EXPECT_EQ(f->kv_type, ElemType::kBF16);
  EXPECT_TRUE(f->q_vec) << "f32 queries load as f32 vectors";
  EXPECT_FALSE(f->k_vec) << "bf16 keys convert element by element";
  EXPECT_EQ(ComputeKindFor(DType::kF16, DType::kBF16, ComputeMode::kExact), ComputeKind::kF32);
  EXPECT_FALSE(f->round_q || f->round_p) << "EXACT rounds nothing";
}

TEST(MakeFlashParamsTest, OptionalTensors) {
  AttentionProblem p = Gqa(Layout::kBHTD, DType::kF32, DType::kF32);
  p.kv_lengths = {9, 3};
  p.blocked_mask = true;
  p.additive_bias = true;
  p.return_lse = true;
  p.softcap = 30.0f;
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 4;
  p.window_right = 1;
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->lse, data->lse.data());
  EXPECT_EQ(f->lse_stride_b, 8 * 5);
  EXPECT_EQ(f->lse_stride_h, 5);
  EXPECT_EQ(f->lse_stride_t, 1);
  EXPECT_EQ(f->kv_lengths, data->kv_lengths.data());
  EXPECT_EQ(f->kv_lengths_stride, 1);
  EXPECT_EQ(f->blocked_mask, data->blocked_mask.data());
  EXPECT_EQ(f->mask_stride.t, 9);
  EXPECT_EQ(f->bias, data->bias.data());
  EXPECT_EQ(f->bias_stride.c, 1);
  EXPECT_EQ(f->softcap, 30.0f);
  EXPECT_EQ(f->mask.left, 4);
  EXPECT_EQ(f->mask.right, 1);
}

// Sinks and ALiBi slopes reach the kernels as [H] views; SinkOf and
// AlibiTermOf (host and device) read them as core/sinks.h and core/alibi.h
// define them.
TEST(MakeFlashParamsTest, SinksAndAlibiSlopes) {
  AttentionProblem p = Gqa(Layout::kBTHD, DType::kF32, DType::kF32);
  p.sinks = p.alibi = true;
  p.alignment = Alignment::kBottomRight;
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto* sinks = static_cast<float*>(data->sinks.data());
  auto* slopes = static_cast<float*>(data->alibi_slopes.data());
  for (int64_t h = 0; h < p.num_heads; ++h) {
    sinks[h] = 0.5f * static_cast<float>(h);
    slopes[h] = 1.0f / static_cast<float>(h + 1);
  }
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->sinks, sinks);
  EXPECT_EQ(f->sinks_stride, 1);
  EXPECT_EQ(f->alibi_slopes, slopes);
  EXPECT_EQ(f->alibi_stride, 1);
  EXPECT_EQ(SinkOf(*f, 3), 1.5f);
  // Query i's diagonal is key i + Tk - Tq (bottom-right), here 4 + 9 - 5.
  EXPECT_EQ(AlibiTermOf(*f, 1, 4, 2, p.kv_len), AlibiTerm(0.5f, 8, 2));
  EXPECT_EQ(AlibiTermOf(*f, 1, 4, 2, p.kv_len), -3.0f);
  EXPECT_EQ(AlibiTermOf(*f, 3, 0, 9, p.kv_len), AlibiTerm(0.25f, 4, 9));

  p.sinks = p.alibi = false;  // absent: no sink (-inf), no term
  auto plain = ProblemData::Allocate(p);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto g = MakeFlashParams(p, plain->args());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->sinks, nullptr);
  EXPECT_EQ(g->alibi_slopes, nullptr);
  EXPECT_EQ(SinkOf(*g, 3), -INFINITY);
  EXPECT_EQ(AlibiTermOf(*g, 1, 4, 2, p.kv_len), 0.0f);
}

TEST(VectorLoadableTest, NeedsMatchingTypeAlignmentAndWholeVectors) {
  AttentionProblem p = Gqa(Layout::kBHTD, DType::kF16, DType::kF16);
  p.head_dim = 20;  // not a multiple of 8 halves
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(VectorLoadable(data->args().q, ComputeKind::kF16, 20));
  p.head_dim = 24;
  data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  TensorView q = data->args().q;
  EXPECT_TRUE(VectorLoadable(q, ComputeKind::kF16, 24));
  EXPECT_FALSE(VectorLoadable(q, ComputeKind::kBF16, 24)) << "type differs";
  q.data = static_cast<char*>(q.data) + 2;
  EXPECT_FALSE(VectorLoadable(q, ComputeKind::kF16, 24)) << "misaligned";
}

// Byte address of element `elements` of t's storage, for pointer checks.
const void* At(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.data()) +
         elements * static_cast<int64_t>(DTypeSize(t.view().dtype));
}

// A pool [num_pages, page_size, G, d]: pages in b, rows of a page in t, heads
// in h; the block table [B, max_pages] with its strides; the page shift.
TEST(MakeFlashParamsTest, PagedPoolStridesAndBlockTable) {
  for (int64_t page_size : {16, 32, 64, 128, 256}) {
    AttentionProblem p = Gqa(Layout::kBHTD, DType::kBF16, DType::kBF16);
    p.kv_len = 600;
    p.page_size = page_size;
    p.num_pages = 2 * p.max_pages() + 1;
    p.name = p.Id();
    auto data = ProblemData::Allocate(p);
    ASSERT_TRUE(data.ok()) << data.status();
    auto f = MakeFlashParams(p, data->args());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->k, data->k.data());
    EXPECT_EQ(f->v, data->v.data());
    EXPECT_EQ(f->k_stride.b, page_size * 2 * 64) << "one page";
    EXPECT_EQ(f->k_stride.t, 2 * 64) << "one row of a page";
    EXPECT_EQ(f->k_stride.h, 64);
    EXPECT_EQ(f->k_stride.c, 1);
    EXPECT_EQ(f->v_stride.b, f->k_stride.b);
    EXPECT_EQ(f->v_stride.t, f->k_stride.t);
    EXPECT_EQ(f->block_table, data->block_table.data());
    EXPECT_EQ(f->block_table_stride_b, p.max_pages());
    EXPECT_EQ(f->block_table_stride_j, 1);
    EXPECT_EQ(f->page_size, page_size);
    EXPECT_EQ(int64_t{1} << f->page_shift, page_size);
    EXPECT_EQ(f->kv_len, 600) << "the logical key count, not the pool's rows";
    EXPECT_TRUE(f->k_vec && f->v_vec) << "pages of 16-byte aligned rows load as vectors";
    EXPECT_EQ(f->k_scale, nullptr);
    EXPECT_EQ(f->v_scale, nullptr);
  }
  const AttentionProblem dense = Gqa(Layout::kBHTD, DType::kBF16, DType::kBF16);
  auto data = ProblemData::Allocate(dense);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(dense, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->block_table, nullptr);
  EXPECT_EQ(f->page_size, 0);
}

// The kernels' row addressing (KvRowOf, KvOffset, KvScale) agrees with
// core's KvRows, which the reference and highway use, for every key row of
// every sequence and KV head: dense in both layouts and paged with shuffled
// and shared pages (ProblemData::Random), float and int8.
TEST(KvRowOfTest, MatchesCoreKvRowsDenseAndPaged) {
  struct Case {
    Layout layout;
    DType kv_dtype;
    int64_t page_size, num_pages;
  };
  const Case cases[] = {{Layout::kBHTD, DType::kF32, 0, 0},
                        {Layout::kBTHD, DType::kI8, 0, 0},
                        {Layout::kBHTD, DType::kF16, 16, 12},
                        {Layout::kBTHD, DType::kI8, 16, 12},
                        {Layout::kBHTD, DType::kI8, 64, 4}};
  for (const Case& c : cases) {
    AttentionProblem p = Gqa(c.layout, DType::kF32, c.kv_dtype);
    p.kv_len = 150;  // 10 + 5 pages of 16 (3 + 2 of 64): fewer in the pool share
    p.kv_lengths = {150, 77};
    p.page_size = c.page_size;
    p.num_pages = c.num_pages;
    p.name = p.Id();
    auto data = ProblemData::Random(p, 3);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs a = data->args();
    auto f = MakeFlashParams(p, a);
    ASSERT_TRUE(f.ok()) << f.status();
    const KvRows rows(p, a);
    const bool int8 = c.kv_dtype == DType::kI8;
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t g = 0; g < p.num_kv_heads; ++g) {
        for (int64_t t = 0; t < p.KvLength(b); ++t) {
          const KvRow r = KvRowOf(*f, b, t);
          ASSERT_EQ(KvOffset(f->k_stride, r, g), rows.Offset(a.k, b, g, t))
              << p.name << " b" << b << " g" << g << " t" << t;
          ASSERT_EQ(KvOffset(f->v_stride, r, g), rows.Offset(a.v, b, g, t)) << p.name;
          if (int8) {
            const int64_t scale_at = rows.ScaleOffset(a.k_scale, b, g, t);
            ASSERT_EQ(KvOffset(f->k_scale_stride, r, g), scale_at) << p.name;
            ASSERT_EQ(KvOffset(f->v_scale_stride, r, g), rows.ScaleOffset(a.v_scale, b, g, t));
            // Pool rows nobody reads hold NaN scales: a wrong page would show.
            const float scale = KvScale(f->k_scale, f->k_scale_stride, r, g);
            ASSERT_EQ(scale, static_cast<const float*>(a.k_scale.data)[scale_at]);
            ASSERT_FALSE(std::isnan(scale)) << p.name << " b" << b << " t" << t;
          } else {
            EXPECT_EQ(KvScale(f->k_scale, f->k_scale_stride, r, g), 1.0f);
          }
        }
      }
    }
  }
}

// int8 K/V: computed in f32 from element loads, the scales [B, G, Tk] in the
// layout's token order ([B, Tk, G] storage for BTHD).
TEST(MakeFlashParamsTest, Int8ScalesDense) {
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    const AttentionProblem p = Gqa(layout, DType::kBF16, DType::kI8);
    auto data = ProblemData::Allocate(p);
    ASSERT_TRUE(data.ok()) << data.status();
    auto f = MakeFlashParams(p, data->args());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->kv_type, ElemType::kI8);
    EXPECT_EQ(f->q_type, ElemType::kBF16);
    EXPECT_EQ(f->compute, ComputeKind::kF32);
    EXPECT_FALSE(f->k_vec || f->v_vec) << "int8 rows are scaled element by element";
    EXPECT_EQ(f->k_scale, data->k_scale.data());
    EXPECT_EQ(f->v_scale, data->v_scale.data());
    const Strides4& s = f->k_scale_stride;
    EXPECT_EQ(s.b, 2 * 9);
    EXPECT_EQ(s.h, layout == Layout::kBHTD ? 9 : 1);
    EXPECT_EQ(s.t, layout == Layout::kBHTD ? 1 : 2);
    EXPECT_EQ(s.c, 0);
    EXPECT_EQ(f->v_scale_stride.t, s.t);
  }
  EXPECT_EQ(ComputeKindFor(DType::kF16, DType::kI8, ComputeMode::kExact), ComputeKind::kF32);
}

// int8 pools: scales [num_pages, page_size, G] in the pool's roles.
TEST(MakeFlashParamsTest, Int8ScalesPaged) {
  AttentionProblem p = Gqa(Layout::kBHTD, DType::kF16, DType::kI8);
  p.kv_len = 100;
  p.page_size = 32;
  p.num_pages = 7;
  p.name = p.Id();
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(p, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->k_stride.b, 32 * 2 * 64);
  EXPECT_EQ(f->k_scale, data->k_scale.data());
  EXPECT_EQ(f->k_scale_stride.b, 32 * 2) << "one page of scales";
  EXPECT_EQ(f->k_scale_stride.t, 2);
  EXPECT_EQ(f->k_scale_stride.h, 1);
  EXPECT_EQ(f->v_scale_stride.b, 32 * 2);
  EXPECT_EQ(f->page_shift, 5);
}

// Compute modes (config.proto compute): EXACT rounds nothing and keeps P in
// f32; FAST with 16-bit K/V computes in K/V's type (Q rounded to it on load,
// P rounded to it for a tensor-core / 16-bit-GEMM P.V); FAST with f32 K/V
// has nothing to round; FAST with int8 K/V is refused (fast_kv_dtypes).
TEST(MakeFlashParamsTest, ComputeModes) {
  struct Case {
    DType q, kv;
    ComputeMode mode;
    ComputeKind compute;
    bool round;  // round_q and round_p
    ElemType p_type;
    const char* tag;
  };
  const ComputeMode kExact = ComputeMode::kExact, kFast = ComputeMode::kFast;
  const ElemType f32 = ElemType::kF32, f16 = ElemType::kF16, bf16 = ElemType::kBF16;
  const Case cases[] = {
      {DType::kBF16, DType::kBF16, kExact, ComputeKind::kBF16, false, f32, "p=f32"},
      {DType::kF16, DType::kF16, kExact, ComputeKind::kF16, false, f32, "p=f32"},
      {DType::kF32, DType::kBF16, kExact, ComputeKind::kF32, false, f32, "p=f32"},
      {DType::kF16, DType::kBF16, kExact, ComputeKind::kF32, false, f32, "p=f32"},
      {DType::kF32, DType::kF32, kExact, ComputeKind::kF32, false, f32, "p=f32"},
      {DType::kBF16, DType::kBF16, kFast, ComputeKind::kBF16, true, bf16, "p=bf16"},
      {DType::kF16, DType::kF16, kFast, ComputeKind::kF16, true, f16, "p=f16"},
      {DType::kF32, DType::kBF16, kFast, ComputeKind::kBF16, true, bf16, "q->bf16 p=bf16"},
      {DType::kF32, DType::kF16, kFast, ComputeKind::kF16, true, f16, "q->f16 p=f16"},
      {DType::kBF16, DType::kF16, kFast, ComputeKind::kF16, true, f16, "q->f16 p=f16"},
      {DType::kF16, DType::kBF16, kFast, ComputeKind::kBF16, true, bf16, "q->bf16 p=bf16"},
      {DType::kF32, DType::kF32, kFast, ComputeKind::kF32, false, f32, "p=f32"},
      {DType::kBF16, DType::kF32, kFast, ComputeKind::kF32, false, f32, "p=f32"},
  };
  for (const Case& c : cases) {
    AttentionProblem p = Gqa(Layout::kBHTD, c.q, c.kv);
    p.compute = c.mode;
    SCOPED_TRACE(testing::Message()
                 << DTypeName(c.q) << "/" << DTypeName(c.kv) << " " << ComputeModeName(c.mode));
    EXPECT_EQ(ComputeKindFor(c.q, c.kv, c.mode), c.compute);
    auto data = ProblemData::Allocate(p);
    ASSERT_TRUE(data.ok()) << data.status();
    auto f = MakeFlashParams(p, data->args());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->compute, c.compute);
    EXPECT_EQ(f->round_q, c.round);
    EXPECT_EQ(f->round_p, c.round);
    EXPECT_EQ(ProbabilityType(*f), c.p_type);
    EXPECT_EQ(ComputeTag(*f), c.tag);
    // cuBLAS: Q.K in the compute type, P.V in P's type (f32 under EXACT).
    const CublasTypes t = CublasTypesFor(*f);
    EXPECT_EQ(t.qk, static_cast<ElemType>(c.compute));
    EXPECT_EQ(t.pv, c.p_type);
    // Q is vector-loaded only when stored in the tiles' type: a Q that FAST
    // rounds converts element by element.
    EXPECT_EQ(f->q_vec, DTypeName(c.q) == std::string(ElemTypeName(ElemType(c.compute))));
  }
  AttentionProblem int8 = Gqa(Layout::kBHTD, DType::kBF16, DType::kI8);
  int8.compute = ComputeMode::kFast;
  auto data = ProblemData::Allocate(int8);
  ASSERT_TRUE(data.ok()) << data.status();
  const auto refused = MakeFlashParams(int8, data->args());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  int8.compute = ComputeMode::kExact;
  auto exact = MakeFlashParams(int8, data->args());
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(ComputeTag(*exact), "p=f32");
}

// The kernels' fp8 decoding (core/fp8.h Fp8CodeValue, host and device)
// gives the host's DecodeFp8 table on every code of both formats: the same
// bits (signed zeros and subnormals included), NaN for NaN. (fp8_test checks
// the values themselves.)
TEST(Fp8CodeValueTest, EqualsCoreDecodeOnEveryCode) {
  for (const bool e4m3 : {true, false}) {
    for (int code = 0; code < 256; ++code) {
      SCOPED_TRACE(testing::Message() << (e4m3 ? "e4m3" : "e5m2") << " code " << code);
      const float want =
          DecodeFp8(static_cast<uint8_t>(code), e4m3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
      const float got = Fp8CodeValue(static_cast<uint8_t>(code), e4m3);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << got;
        continue;
      }
      uint32_t want_bits, got_bits;
      std::memcpy(&want_bits, &want, 4);
      std::memcpy(&got_bits, &got, 4);
      EXPECT_EQ(got_bits, want_bits) << want << " decoded as " << got;
    }
  }
}

// fp8 K/V: scaled rows like int8 (the same scale views, dense and paged),
// computed in f32, never vector-loaded. FAST rounds Q to bf16 for fp8
// (core/fast_compute.h), which these kernels do not: refused, like int8.
TEST(MakeFlashParamsTest, Fp8KvIsScaledAndComputesInF32) {
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
      SCOPED_TRACE(testing::Message() << DTypeName(kv) << " " << ComputeModeName(mode));
      AttentionProblem p = Gqa(Layout::kBTHD, DType::kBF16, kv);
      p.compute = mode;
      auto data = ProblemData::Allocate(p);
      ASSERT_TRUE(data.ok()) << data.status();
      auto f = MakeFlashParams(p, data->args());
      if (mode == ComputeMode::kFast) {
        EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
        continue;
      }
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ(f->kv_type, kv == DType::kF8E4M3 ? ElemType::kF8E4M3 : ElemType::kF8E5M2);
      EXPECT_TRUE(IsScaledElem(f->kv_type));
      EXPECT_EQ(f->compute, ComputeKind::kF32);
      EXPECT_FALSE(f->round_q || f->round_p);
      EXPECT_FALSE(f->k_vec || f->v_vec) << "fp8 rows are decoded element by element";
      EXPECT_EQ(f->k_scale, data->k_scale.data());
      EXPECT_EQ(f->v_scale, data->v_scale.data());
      EXPECT_EQ(f->k_scale_stride.t, 2) << "token-major scales [B, Tk, G]";
      EXPECT_EQ(ComputeTag(*f), "p=f32");
    }
  }
  EXPECT_STREQ(ElemTypeName(ElemType::kF8E4M3), "f8e4m3");
  EXPECT_STREQ(ElemTypeName(ElemType::kF8E5M2), "f8e5m2");
  EXPECT_FALSE(IsScaledElem(ElemType::kBF16));
  // Q and O cannot be fp8.
  AttentionProblem q8 = Gqa(Layout::kBHTD, DType::kF8E4M3, DType::kF8E4M3);
  auto data = ProblemData::Allocate(q8);
  if (data.ok()) {  // the problem itself may refuse fp8 Q first
    const auto refused = MakeFlashParams(q8, data->args());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// Ev != E: V and O carry value_dim columns; Q and K head_dim. O's strides
// and V's vector loads follow dv.
TEST(MakeFlashParamsTest, ValueHeadDimOfItsOwn) {
  for (const int64_t dv : {32, 96}) {
    AttentionProblem p = Gqa(Layout::kBHTD, DType::kBF16, DType::kBF16);
    p.value_head_dim = dv;
    p.name = p.Id();
    auto data = ProblemData::Allocate(p);
    ASSERT_TRUE(data.ok()) << data.status();
    auto f = MakeFlashParams(p, data->args());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->head_dim, 64);
    EXPECT_EQ(f->value_dim, dv);
    EXPECT_EQ(f->o_stride.t, dv);
    EXPECT_EQ(f->v_stride.t, dv);
    EXPECT_EQ(f->k_stride.t, 64);
    EXPECT_TRUE(f->v_vec) << "dv " << dv << " is whole 16-byte vectors of bf16";
  }
  // Without value_head_dim, dv is d.
  const AttentionProblem same = Gqa(Layout::kBHTD, DType::kF16, DType::kF16);
  auto data = ProblemData::Allocate(same);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(same, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->value_dim, f->head_dim);
}

// A ragged batch's launches keep the problem's compute mode.
TEST(MakeFlashLaunchesTest, RaggedLaunchesKeepTheComputeMode) {
  AttentionProblem p = Gqa(Layout::kBTHD, DType::kF16, DType::kF16);
  p.batch = 2;
  p.q_lengths = {5, 2};
  p.kv_lengths = {9, 4};
  p.compute = ComputeMode::kFast;
  p.name = p.Id();
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto launches = MakeFlashLaunches(p, data->args());
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), 2u);
  for (const FlashLaunch& l : *launches) {
    EXPECT_TRUE(l.params.round_q && l.params.round_p);
    EXPECT_EQ(ProbabilityType(l.params), ElemType::kF16);
  }
}

TEST(MakeFlashParamsTest, QueriesMustBeFloat) {
  EXPECT_EQ(ElemTypeOf(DType::kI8).value(), ElemType::kI8);
  EXPECT_FALSE(ElemTypeOf(DType::kI32).ok());
  EXPECT_FALSE(ElemTypeOf(DType::kU8).ok());
}

// A ragged batch: MakeFlashParams refuses it; MakeFlashLaunches gives one
// batch-1 launch per sequence with queries, its pointers offset into the
// packed tensors by the running sums of the lengths.
AttentionProblem Ragged() {
  AttentionProblem p = Gqa(Layout::kBTHD, DType::kF16, DType::kF16);
  p.batch = 4;
  p.q_len = 10;
  p.kv_len = 50;
  p.q_lengths = {10, 0, 1, 3};
  p.kv_lengths = {50, 7, 0, 20};
  p.return_lse = true;
  p.name = p.Id();
  return p;
}

TEST(MakeFlashLaunchesTest, RaggedBatchLaunchesPerSequence) {
  const AttentionProblem p = Ragged();
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs a = data->args();
  auto whole = MakeFlashParams(p, a);
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kInvalidArgument);
  auto launches = MakeFlashLaunches(p, a);
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), 3u) << "sequence 1 has no queries";
  const int64_t H = 8, G = 2, d = 64, total_q = 14;
  struct Want {
    int64_t sequence, q_offset, q_len, k_offset, kv_len;
    bool no_keys;
  };
  const Want want[] = {
      // Sequence 2 has no keys: its (never read) K/V view is row 0 (core/ragged.cc).
      {0, 0, 10, 0, 50, false},
      {2, 10, 1, 0, 1, true},
      {3, 11, 3, 57, 20, false}};
  for (size_t n = 0; n < 3; ++n) {
    const FlashLaunch& l = (*launches)[n];
    const FlashParams& f = l.params;
    const Want& w = want[n];
    SCOPED_TRACE(w.sequence);
    EXPECT_EQ(l.sequence, w.sequence);
    EXPECT_EQ(f.batch, 1);
    EXPECT_EQ(f.q_len, w.q_len);
    EXPECT_EQ(f.kv_len, w.kv_len);
    EXPECT_EQ(f.rows_per_kv_head, w.q_len * 4);
    EXPECT_EQ(f.mask.q_len, w.q_len) << "bottom-right alignment per sequence";
    EXPECT_EQ(f.q, At(data->q, w.q_offset * H * d));
    EXPECT_EQ(f.o, At(data->o, w.q_offset * H * d));
    EXPECT_EQ(f.q_stride.t, H * d);
    EXPECT_EQ(f.q_stride.h, d);
    EXPECT_EQ(f.o_stride.t, H * d);
    EXPECT_EQ(f.k, At(data->k, w.k_offset * G * d));
    EXPECT_EQ(f.v, At(data->v, w.k_offset * G * d));
    EXPECT_EQ(f.k_stride.t, G * d);
    EXPECT_EQ(f.k_stride.h, d);
    EXPECT_EQ(f.lse, At(data->lse, w.q_offset)) << "lse is [H, total_q]";
    EXPECT_EQ(f.lse_stride_h, total_q);
    EXPECT_EQ(f.lse_stride_t, 1);
    // A sequence without keys keeps a kv_lengths of 0 (its element of the
    // tensor), so its rows come out fully blocked.
    EXPECT_EQ(f.kv_lengths, w.no_keys ? At(data->kv_lengths, w.sequence) : nullptr);
    EXPECT_EQ(f.block_table, nullptr);
    EXPECT_TRUE(f.q_vec && f.k_vec && f.v_vec);
  }
}

TEST(MakeFlashLaunchesTest, RaggedPagedInt8KeepsThePoolAndTakesTableRows) {
  AttentionProblem p = Ragged();
  p.kv_dtype = DType::kI8;
  p.page_size = 16;
  p.num_pages = 4 * p.max_pages();
  p.name = p.Id();
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto launches = MakeFlashLaunches(p, data->args());
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), 3u);
  for (const FlashLaunch& l : *launches) {
    const FlashParams& f = l.params;
    SCOPED_TRACE(l.sequence);
    EXPECT_EQ(f.k, data->k.data()) << "the whole pool";
    EXPECT_EQ(f.k_scale, data->k_scale.data());
    EXPECT_EQ(f.v_scale, data->v_scale.data());
    EXPECT_EQ(f.k_stride.b, 16 * 2 * 64);
    EXPECT_EQ(f.k_scale_stride.b, 16 * 2);
    EXPECT_EQ(f.block_table, At(data->block_table, l.sequence * p.max_pages()));
    EXPECT_EQ(f.block_table_stride_j, 1);
    EXPECT_EQ(f.page_shift, 4);
  }
}

TEST(MakeFlashLaunchesTest, DenseBatchIsOneLaunch) {
  const AttentionProblem p = Gqa(Layout::kBHTD, DType::kF32, DType::kF32);
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  auto launches = MakeFlashLaunches(p, data->args());
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), 1u);
  EXPECT_EQ((*launches)[0].params.batch, 2);
  EXPECT_EQ((*launches)[0].params.q, data->q.data());
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit

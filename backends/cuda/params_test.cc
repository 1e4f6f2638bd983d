// Arguments to kernel parameters, on the CPU: strides of both layouts, the
// GQA packing, scale, masks, optional tensors and the vector-load rules.
#include "backends/cuda/params.h"

#include "core/problem_data.h"
#include "gtest/gtest.h"

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
  EXPECT_EQ(ComputeKindFor(DType::kF16, DType::kBF16), ComputeKind::kF32);
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

}  // namespace
}  // namespace cuda
}  // namespace attnkit

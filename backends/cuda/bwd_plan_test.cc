// Host tests of the CUDA backward pass's planning (bwd_plan.h) and of the
// rules its kernels share with the host (bwd_params.h): buckets and tiles,
// key blocks, chunking under a workspace budget, which steps run, the pair
// arithmetic; and an emulation of the kernels' schedule on the CPU (the same
// plan, BwdStepVisible, PairGradOf, workspace slices and dQ-sum order as
// flash_bwd_kernel.cuh / flash_bwd_aux.cu) checked against the fp64
// reference backward over the cases the GPU test runs too (bwd_test_cases.h).
// The kernels themselves run in cuda_plugin_test on a GPU.
#include "backends/cuda/bwd_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cuda/bwd_params.h"
#include "backends/cuda/bwd_test_cases.h"
#include "core/dtype.h"
#include "core/mask.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare_grad.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Built {
  ProblemData data;
  GradData grads;
  BwdParams params;
};

Built Build(const AttentionProblem& p, bool with_dbias = false) {
  auto data = ProblemData::Random(p, 3);
  EXPECT_TRUE(data.ok()) << data.status();
  auto grads = GradData::Random(p, 4, with_dbias);
  EXPECT_TRUE(grads.ok()) << grads.status();
  auto params = MakeBwdParams(p, data->args(), grads->args());
  EXPECT_TRUE(params.ok()) << params.status();
  return Built{std::move(*data), std::move(*grads), *params};
}

AttentionProblem Gqa(int64_t q_len, int64_t kv_len, int64_t head_dim) {
  AttentionProblem p = BasicProblem(2, 8, 2, q_len, kv_len, head_dim);
  p.return_lse = true;
  return p;
}

TEST(BwdPlanTest, BucketsAndTiles) {
  EXPECT_EQ(BwdHeadDimBucket(0), 0);
  EXPECT_EQ(BwdHeadDimBucket(1), 64);
  EXPECT_EQ(BwdHeadDimBucket(16), 64);
  EXPECT_EQ(BwdHeadDimBucket(64), 64);
  EXPECT_EQ(BwdHeadDimBucket(65), 128);
  EXPECT_EQ(BwdHeadDimBucket(80), 128);
  EXPECT_EQ(BwdHeadDimBucket(256), 256);
  EXPECT_EQ(BwdHeadDimBucket(257), 0);
  for (int d : kBwdHeadDimBuckets) {
    EXPECT_GT(BwdSmemBytes(d), 0);
    EXPECT_LE(BwdSmemBytes(d), 166912) << "d " << d << ": over sm_80's shared memory";
  }
  EXPECT_EQ(BwdSmemBytes(32), 0);

  const Built b = Build(Gqa(37, 101, 80));
  auto plan = PlanBackward(b.params, kBwdWorkspaceBudgetBytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->bucket, 128);
  EXPECT_EQ(plan->block_n, 64);
  EXPECT_EQ(plan->block_m, 32);
  EXPECT_EQ(plan->key_blocks, 2);  // ceil(101 / 64)
  EXPECT_EQ(plan->row_tiles, 5);   // ceil(37 * 4 / 32)
  EXPECT_EQ(plan->num_chunks, 1);
  EXPECT_EQ(plan->blocks_per_chunk, 2);
  EXPECT_EQ(plan->slice_bytes, size_t{4} * 2 * 8 * 37 * 80);
  EXPECT_EQ(plan->workspace_bytes % 256, 0u);
  EXPECT_GE(plan->partial_offset, size_t{4} * 2 * 8 * 37);  // after D
  EXPECT_EQ(plan->workspace_bytes, plan->acc_offset) << "one chunk: no accumulator";
  EXPECT_EQ(BwdKernelName(*plan), "flash-bwd-f32 d128 m32n64 kblocks=2 chunks=1");

  const Built wide = Build(Gqa(5, 100, 256));
  auto plan256 = PlanBackward(wide.params, kBwdWorkspaceBudgetBytes);
  ASSERT_TRUE(plan256.ok());
  EXPECT_EQ(plan256->block_n, 32);
  EXPECT_EQ(plan256->key_blocks, 4);
}

TEST(BwdPlanTest, RefusesWhatItCannotRun) {
  AttentionProblem p = Gqa(8, 8, 64);
  Built b = Build(p);
  b.params.fwd.head_dim = 300;
  const auto plan = PlanBackward(b.params, kBwdWorkspaceBudgetBytes);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(plan.status().message().find("head_dim 300"), std::string::npos) << plan.status();

  // No lse: the backward pass has nothing to recompute P from.
  const ProblemData data = *ProblemData::Random(p, 1);
  const GradData grads = *GradData::Random(p, 2, false);
  AttentionArgs no_lse = data.args();
  no_lse.lse = TensorView{};
  EXPECT_EQ(MakeBwdParams(p, no_lse, grads.args()).status().code(),
            absl::StatusCode::kInvalidArgument);
  AttentionProblem int8 = p;
  int8.kv_dtype = DType::kI8;
  EXPECT_EQ(MakeBwdParams(int8, data.args(), grads.args()).status().code(),
            absl::StatusCode::kInvalidArgument);
  AttentionProblem fp8 = p;
  fp8.kv_dtype = DType::kF8E4M3;
  const auto fp8_params = MakeBwdParams(fp8, data.args(), grads.args());
  EXPECT_EQ(fp8_params.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fp8_params.status().message().find("f8e4m3 K/V"), std::string::npos)
      << fp8_params.status();
  // Ev != E: no backward kernel reads V's own head dim.
  Built ev = Build(p);
  ev.params.fwd.value_dim = 32;
  const auto ev_plan = PlanBackward(ev.params, kBwdWorkspaceBudgetBytes);
  EXPECT_EQ(ev_plan.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(ev_plan.status().message().find("value_head_dim 32"), std::string::npos)
      << ev_plan.status();
}

TEST(BwdPlanTest, ParamsFollowTheViews) {
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    AttentionProblem p = Gqa(7, 9, 16);
    p.layout = layout;
    p.dtype = DType::kBF16;
    p.kv_dtype = DType::kF16;
    p.additive_bias = true;
    const Built b = Build(p, /*with_dbias=*/true);
    const BwdParams& bp = b.params;
    const GradArgs g = b.grads.args();
    EXPECT_EQ(bp.fwd.q_type, ElemType::kBF16);
    EXPECT_EQ(bp.fwd.kv_type, ElemType::kF16);
    EXPECT_EQ(bp.d_o, g.d_o.data);
    EXPECT_EQ(bp.dq, g.dq.data);
    EXPECT_EQ(bp.dk, g.dk.data);
    EXPECT_EQ(bp.dv, g.dv.data);
    EXPECT_EQ(bp.dbias, g.dbias.data);
    const TensorView* views[] = {&g.d_o, &g.dq, &g.dk, &g.dv, &g.dbias};
    const Strides4* strides[] = {&bp.do_stride, &bp.dq_stride, &bp.dk_stride, &bp.dv_stride,
                                 &bp.dbias_stride};
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(strides[t]->b, views[t]->strides[0]);
      EXPECT_EQ(strides[t]->h, views[t]->strides[1]);
      EXPECT_EQ(strides[t]->t, views[t]->strides[2]);
      EXPECT_EQ(strides[t]->c, views[t]->strides[3]);
    }
    if (layout == Layout::kBTHD) {
      EXPECT_EQ(bp.dq_stride.t, 8 * 16);  // [B, T, H, d]
    }
    EXPECT_EQ(bp.fwd.rows_per_kv_head, 7 * 4);
  }
}

// A budget below the partials of every key block: chunks of as many blocks
// as fit beside the accumulator, spread evenly, covering every block once.
TEST(BwdPlanTest, ChunksKeepToTheBudget) {
  const Built b = Build(Gqa(100, 1000, 64));  // 16 key blocks
  auto whole = PlanBackward(b.params, kBwdWorkspaceBudgetBytes);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->key_blocks, 16);
  EXPECT_EQ(whole->num_chunks, 1);
  const size_t slice = (whole->slice_bytes + 255) / 256 * 256;
  for (int64_t fit : {0, 1, 2, 3, 5, 15, 16, 40}) {
    auto plan = PlanBackward(b.params, static_cast<size_t>(fit) * slice);
    ASSERT_TRUE(plan.ok());
    const int64_t per = fit >= 16 ? 16 : std::max<int64_t>(1, fit - 1);
    EXPECT_EQ(plan->num_chunks, (16 + per - 1) / per) << "fit " << fit;
    EXPECT_LE(plan->blocks_per_chunk, per) << "fit " << fit;
    if (fit >= 2) {
      EXPECT_LE(plan->workspace_bytes - plan->partial_offset, static_cast<size_t>(fit) * slice)
          << "fit " << fit;
    }
    EXPECT_EQ(plan->workspace_bytes > plan->acc_offset, plan->num_chunks > 1);
    int64_t next = 0;
    for (int64_t c = 0; c < plan->num_chunks; ++c) {
      const ChunkSpan span = ChunkOf(*plan, c);
      EXPECT_EQ(span.begin, next);
      EXPECT_GT(span.end, span.begin) << "chunk " << c << " of " << plan->num_chunks << " empty";
      next = span.end;
    }
    EXPECT_EQ(next, 16);
  }
}

// Every visible (query, key) pair lies in a step that runs, and the skipping
// is real: masks skip steps (top-left causal with Tq < Tk, most of them).
TEST(BwdPlanTest, StepsCoverEveryVisiblePair) {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow}) {
    for (Alignment align : {Alignment::kTopLeft, Alignment::kBottomRight}) {
      for (int64_t kv_length : {300, 150, 0}) {
        AttentionProblem p = BasicProblem(1, 6, 2, 97, 300, 64);
        p.mask = mask;
        p.alignment = align;
        if (mask == MaskKind::kSlidingWindow) {
          p.window_left = 20;
          p.window_right = 3;
        }
        p.kv_lengths = {kv_length};
        p.return_lse = true;
        const Built b = Build(p);
        auto plan = PlanBackward(b.params, kBwdWorkspaceBudgetBytes);
        ASSERT_TRUE(plan.ok());
        BwdParams bp = b.params;
        ApplyBwdPlan(*plan, nullptr, &bp);
        int64_t runs = 0;
        for (int64_t tile = 0; tile < plan->row_tiles; ++tile) {
          for (int64_t kb = 0; kb < plan->key_blocks; ++kb) {
            runs += BwdStepVisible(bp, kv_length, tile, kb) ? 1 : 0;
          }
        }
        const int64_t group = p.group_size();
        for (int64_t row = 0; row < p.q_len * group; ++row) {
          const KeyRange keys = VisibleKeys(p.mask_params(), row / group, kv_length);
          for (int64_t j = keys.begin; j < keys.end; ++j) {
            ASSERT_TRUE(BwdStepVisible(bp, kv_length, row / plan->block_m, j / plan->block_n))
                << p.Id() << " row " << row << " key " << j;
          }
        }
        EXPECT_FALSE(BwdStepVisible(bp, kv_length, plan->row_tiles, 0)) << "past the last tile";
        const int64_t all = plan->row_tiles * plan->key_blocks;
        if (kv_length == 0) {
          EXPECT_EQ(runs, 0) << p.Id();
        }
        if (mask == MaskKind::kNone && kv_length > 0) {
          EXPECT_EQ(runs, plan->row_tiles * ((kv_length + 63) / 64)) << p.Id();
        }
        if (mask != MaskKind::kNone && kv_length == 300) {
          EXPECT_LT(runs, all) << p.Id() << ": hidden steps must be skipped";
        }
        if (mask == MaskKind::kCausal && align == Alignment::kTopLeft && kv_length == 300) {
          EXPECT_LT(runs, all / 2) << p.Id() << ": queries 0..96 see keys 0..96 only";
        }
      }
    }
  }
}

TEST(BwdPlanTest, PairGradients) {
  // Blocked in every way: exactly zero, even with NaN products.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const PairGrad g : {PairGradOf(false, nan, nan, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f),
                           PairGradOf(true, nan, nan, -kInf, 1.0f, 0.0f, 1.0f, 0.0f),
                           PairGradOf(true, 1.0f, 2.0f, 0.0f, -kInf, 0.0f, 1.0f, 0.0f)}) {
    EXPECT_EQ(g.p, 0.0f);
    EXPECT_EQ(g.ds, 0.0f);
    EXPECT_EQ(g.dx, 0.0f);
  }
  // s = 0.5 * 2 + 0.25 = 1.25; P = exp(1.25 - 2); dS = P (3 - 1).
  const PairGrad plain = PairGradOf(true, 2.0f, 3.0f, 0.25f, 2.0f, 1.0f, 0.5f, 0.0f);
  EXPECT_NEAR(plain.p, std::exp(-0.75), 1e-6);
  EXPECT_NEAR(plain.ds, 2.0 * std::exp(-0.75), 1e-6);
  EXPECT_EQ(plain.dx, plain.ds);
  // Softcap c = 1.5: s = c tanh(x / c) + bias, dX = dS (1 - tanh^2).
  const double x = 0.5 * 2.0, t = std::tanh(x / 1.5);
  const PairGrad capped = PairGradOf(true, 2.0f, 3.0f, 0.25f, 2.0f, 1.0f, 0.5f, 1.5f);
  const double pc = std::exp(1.5 * t + 0.25 - 2.0);
  EXPECT_NEAR(capped.p, pc, 1e-6);
  EXPECT_NEAR(capped.ds, 2.0 * pc, 1e-6);
  EXPECT_NEAR(capped.dx, 2.0 * pc * (1.0 - t * t), 1e-6);
}

// ---- The kernels' schedule on the CPU ----

DType DTypeOf(ElemType t) {
  switch (t) {
    case ElemType::kF16:
      return DType::kF16;
    case ElemType::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}
int64_t Off(const Strides4& s, int64_t b, int64_t h, int64_t t, int64_t c) {
  return b * s.b + h * s.h + t * s.t + c * s.c;
}
float Load(const void* p, ElemType t, int64_t i) { return LoadAsF32(p, DTypeOf(t), i); }

// BwdDotKernel, then per chunk FlashBackwardKernel (every block) and
// BwdDqSumKernel, in the kernels' orders, with the partial slices poisoned
// with NaN first: a slot the sum reads but no step wrote shows up in dQ.
void EmulateBackward(BwdParams p, const BwdPlan& plan) {
  const FlashParams& f = p.fwd;
  std::vector<float> ws(plan.workspace_bytes / 4, std::numeric_limits<float>::quiet_NaN());
  ApplyBwdPlan(plan, ws.data(), &p);
  const int64_t B = f.batch, H = f.num_heads, Tq = f.q_len, d = f.head_dim, group = f.group_size;
  const int kM = plan.block_m, kN = plan.block_n;
  for (int64_t row = 0; row < B * H * Tq; ++row) {
    const int64_t i = row % Tq, h = row / Tq % H, b = row / Tq / H;
    float acc = 0.0f;
    for (int64_t c = 0; c < d; ++c) {
      acc += Load(f.o, f.q_type, Off(f.o_stride, b, h, i, c)) *
             Load(p.d_o, f.q_type, Off(p.do_stride, b, h, i, c));
    }
    p.dsum[row] = acc;
    for (int64_t j = 0; p.dbias != nullptr && j < f.kv_len; ++j) {
      p.dbias[Off(p.dbias_stride, b, h, i, j)] = 0.0f;
    }
  }
  // BwdSinkGradKernel: per head, lane l sums rows l, l + 32, ... in order,
  // then WarpSum's butterfly (lane l adds lane l ^ offset, offsets 16 .. 1).
  for (int64_t h = 0; p.dsinks != nullptr && f.sinks != nullptr && h < H; ++h) {
    const float sink = SinkOf(f, h);
    float lanes[32] = {};
    for (int l = 0; l < 32 && sink != -std::numeric_limits<float>::infinity(); ++l) {
      for (int64_t n = l; n < B * Tq; n += 32) lanes[l] += SinkGradTerm(p, h, n, sink);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
      std::copy(next, next + 32, lanes);
    }
    p.dsinks[h * p.dsinks_stride] = -lanes[0];
  }
  for (int64_t chunk = 0; chunk < plan.num_chunks; ++chunk) {
    const ChunkSpan span = ChunkOf(plan, chunk);
    p.chunk_begin = span.begin;
    p.chunk_end = span.end;
    for (int64_t kb = span.begin; kb < span.end; ++kb) {
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t g = 0; g < f.num_kv_heads; ++g) {
          int64_t kv_length = f.kv_len;
          if (f.kv_lengths != nullptr) {
            kv_length = std::min<int64_t>(std::max(0, f.kv_lengths[b]), f.kv_len);
          }
          const int64_t k0 = kb * kN;
          const int64_t nk = std::max<int64_t>(0, std::min<int64_t>(kN, kv_length - k0));
          std::vector<float> k(kN * d, 0.0f), v(kN * d, 0.0f), dk(kN * d, 0.0f), dv(kN * d, 0.0f);
          for (int64_t j = 0; j < nk; ++j) {
            for (int64_t c = 0; c < d; ++c) {
              k[j * d + c] = Load(f.k, f.kv_type, Off(f.k_stride, b, g, k0 + j, c));
              v[j * d + c] = Load(f.v, f.kv_type, Off(f.v_stride, b, g, k0 + j, c));
            }
          }
          for (int64_t tile = 0; tile * kM < f.rows_per_kv_head; ++tile) {
            if (!BwdStepVisible(p, kv_length, tile, kb)) continue;
            for (int64_t r = 0; r < kM; ++r) {
              const int64_t row = tile * kM + r;
              if (row >= f.rows_per_kv_head) break;
              const int64_t i = row / group, h = g * group + row % group;
              const float lse = f.lse[b * f.lse_stride_b + h * f.lse_stride_h + i * f.lse_stride_t];
              const float dsum = p.dsum[(b * H + h) * Tq + i];
              const KeyRange keys = VisibleKeys(f.mask, i, kv_length);
              std::vector<float> q(d), d_o(d), dx(kN);
              for (int64_t c = 0; c < d; ++c) {
                q[c] = Load(f.q, f.q_type, Off(f.q_stride, b, h, i, c));
                d_o[c] = Load(p.d_o, f.q_type, Off(p.do_stride, b, h, i, c));
              }
              for (int64_t c = 0; c < kN; ++c) {
                const int64_t j = k0 + c;
                float s = 0.0f, dp = 0.0f;
                for (int64_t e = 0; e < d; ++e) {
                  s += q[e] * k[c * d + e];
                  dp += d_o[e] * v[c * d + e];
                }
                bool visible = j >= keys.begin && j < keys.end;
                if (visible && f.blocked_mask != nullptr) {
                  visible = f.blocked_mask[Off(f.mask_stride, b, h, i, j)] == 0;
                }
                const float bias =
                    visible && f.bias != nullptr ? f.bias[Off(f.bias_stride, b, h, i, j)] : 0.0f;
                const float alibi = visible ? AlibiTermOf(f, h, i, j, kv_length) : 0.0f;
                const PairGrad pg =
                    PairGradOf(visible, s, dp, bias, lse, dsum, f.scale, f.softcap, alibi);
                dx[c] = pg.dx;
                if (p.dbias != nullptr && j < f.kv_len) {
                  p.dbias[Off(p.dbias_stride, b, h, i, j)] = pg.ds;
                }
                for (int64_t e = 0; e < d; ++e) {
                  dv[c * d + e] += pg.p * d_o[e];
                  dk[c * d + e] += pg.dx * q[e];
                }
              }
              float* dst =
                  p.dq_partial + (kb - p.chunk_begin) * p.partial_slice + BwdRowOffset(p, b, h, i);
              for (int64_t e = 0; e < d; ++e) {
                float acc = 0.0f;
                for (int64_t c = 0; c < kN; ++c) acc += dx[c] * k[c * d + e];
                dst[e] = acc;
              }
            }
          }
          for (int64_t j = 0; j < std::min<int64_t>(kN, f.kv_len - k0); ++j) {
            for (int64_t c = 0; c < d; ++c) {
              StoreFromF32(p.dk, DTypeOf(f.kv_type), Off(p.dk_stride, b, g, k0 + j, c),
                           dk[j * d + c] * f.scale);
              StoreFromF32(p.dv, DTypeOf(f.kv_type), Off(p.dv_stride, b, g, k0 + j, c),
                           dv[j * d + c]);
            }
          }
        }
      }
    }
    const bool first = chunk == 0, last = chunk + 1 == plan.num_chunks;
    for (int64_t row = 0; row < B * H * Tq; ++row) {
      const int64_t i = row % Tq, h = row / Tq % H, b = row / Tq / H;
      int64_t kv_length = f.kv_len;
      if (f.kv_lengths != nullptr) {
        kv_length = std::min<int64_t>(std::max(0, f.kv_lengths[b]), f.kv_len);
      }
      const int64_t tile = (i * group + h % group) / kM;
      for (int64_t c = 0; c < d; ++c) {
        float acc = first ? 0.0f : p.dq_acc[row * d + c];
        for (int64_t kb = p.chunk_begin; kb < p.chunk_end; ++kb) {
          if (!BwdStepVisible(p, kv_length, tile, kb)) continue;
          acc += p.dq_partial[(kb - p.chunk_begin) * p.partial_slice + row * d + c];
        }
        if (last) {
          StoreFromF32(p.dq, DTypeOf(f.q_type), Off(p.dq_stride, b, h, i, c), acc * f.scale);
        } else {
          p.dq_acc[row * d + c] = acc;
        }
      }
    }
  }
}

// The fp64 forward's O and LSE, rounded into the problem's o and lse views.
void WriteReferenceForward(const AttentionProblem& p, const ProblemData& data) {
  const AttentionArgs a = data.args();
  const ReferenceResult ref = ComputeReference(p, a);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t row = (b * p.num_heads + h) * p.q_len + i;
        StoreFromF32(a.lse.data, DType::kF32, a.lse.Offset(b, h, i),
                     static_cast<float>(ref.lse[row]));
        for (int64_t c = 0; c < p.head_dim; ++c) {
          StoreFromF32(a.o.data, a.o.dtype, a.o.Offset(b, h, i, c),
                       static_cast<float>(ref.o[row * p.head_dim + c]));
        }
      }
    }
  }
}

// The schedule meets the fp64 reference (with the reference's own O and LSE
// as the forward) and rows that see no key get dQ = 0; chunking the key
// blocks (one per chunk, under a zero budget) gives the same bits.
TEST(BwdPlanTest, EmulatedScheduleMatchesReference) {
  int chunked_cases = 0;
  uint64_t seed = 71;
  for (const BwdTestCase& ec : BackwardTestCases()) {
    const AttentionProblem& p = ec.problem;
    ASSERT_TRUE(ValidateProblem(p).ok()) << p.name << ": " << ValidateProblem(p);
    auto data = BackwardTestData(ec, seed++);
    ASSERT_TRUE(data.ok()) << data.status();
    WriteReferenceForward(p, *data);
    auto grads = GradData::Random(p, seed++, ec.with_dbias);
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto params = MakeBwdParams(p, data->args(), grads->args());
    ASSERT_TRUE(params.ok()) << params.status();
    auto plan = PlanBackward(*params, kBwdWorkspaceBudgetBytes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EmulateBackward(*params, *plan);
    const Comparison c = CompareGradients(
        p, grads->args(), ComputeReferenceBackward(p, data->args(), grads->d_o.view()));
    EXPECT_TRUE(c.ok()) << p.name << ": " << c.mismatches << " of " << c.checked
                        << " outside the bound; first: " << c.first_failure;
    if (ec.block_last_row) {
      EXPECT_TRUE(LastRowDqIsZero(p, *grads));
    }
    if (plan->key_blocks > 1) {
      const std::string whole = GradientBits(*grads);
      auto chunked = PlanBackward(*params, 0);  // one key block per chunk
      ASSERT_TRUE(chunked.ok());
      ASSERT_EQ(chunked->num_chunks, chunked->key_blocks);
      EmulateBackward(*params, *chunked);
      EXPECT_TRUE(whole == GradientBits(*grads)) << p.name << ": chunking changed the bits";
      ++chunked_cases;
    }
  }
  EXPECT_GE(chunked_cases, 5) << "problems with more than one key block";
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit

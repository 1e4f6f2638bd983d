// The backward pass of the Highway flash attention (FlashAttention-2 style):
// plain C++ entry points. The per-target code is in backward-inl.h (the item
// loop) and backward_kernels-inl.h (the tile products), compiled for every
// target in third_party/highway/targets.bzl by backward.cc and chosen at run
// time like the forward's.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_H_
#define ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "backends/highway/flash_params.h"
#include "backends/highway/workspace.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "platform/thread_pool.h"

namespace attnkit {

// The gradient tensors of one call (core/backend.h GradArgs) as the kernels
// read them: d_o [B, H, Tq, d] in o's dtype; dq like q; dk, dv like k;
// dbias f32 [B, H, Tq, Tk] or null.
struct FlashGradParams {
  TensorView d_o, dq, dk, dv;
  float* dbias = nullptr;
  TensorView dbias_view;
};

// `g` must have passed ValidateGradArgs with the problem `p` was made from.
FlashGradParams MakeFlashGradParams(const GradArgs& g);

// What one Backward ran.
struct BackwardRunInfo {
  int64_t target = 0;     // HWY_* bit of the target that ran
  int64_t q_tile = 0;     // query positions (of one head) per tile
  int64_t key_block = 0;  // keys per block (the dK/dV accumulators)
  int tile_rows = 0;      // register tile of the products: rows x columns
  int tile_cols = 0;
  int64_t chunks = 1;  // key-block chunks per (batch, kv head): dQ partials
  int64_t items = 0;   // parallel work items of the main pass
  int threads = 1;

  // "flash-bwd/AVX3_DL qtile=64 kblock=64 mm4x64 chunks=1 items=16 threads=2"
  std::string Describe() const;
};

// Computes dq, dk, dv (and dbias) for `p` (not paged, not int8, not ragged;
// p.lse set: the forward's lse). `target` is a single HWY_* bit to force a
// compiled, supported target, or 0 for the best one (HWY_DYNAMIC_DISPATCH,
// which also honours hwy::SetSupportedTargetsForTest). The gradients are the
// same bit for bit for every thread count: the plan depends on the shape only.
absl::Status FlashAttentionBackward(const FlashParams& p, const FlashGradParams& g, int64_t target,
                                    ThreadPool* pool, Workspace* ws, BackwardRunInfo* info);

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_H_

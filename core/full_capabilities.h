// The capabilities of a backend that implements everything a config can
// express: every dtype, mask, alignment, layout and group size, head dims
// 1..1024, every optional input and output, int8 and paged K/V and ragged
// batches. Backends start from this and
// narrow what they do not do, so "complete" is spelled once.
#ifndef ATTNKIT_CORE_FULL_CAPABILITIES_H_
#define ATTNKIT_CORE_FULL_CAPABILITIES_H_

#include "core/backend.h"

namespace attnkit {

inline Capabilities FullCapabilities() {
  Capabilities c;  // head dims 1..1024, both alignments, any group size
  c.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.kv_dtypes = {DType::kF32, DType::kF16,    DType::kBF16,
                 DType::kI8,  DType::kF8E4M3, DType::kF8E5M2};
  c.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
  c.layouts = {Layout::kBHTD, Layout::kBTHD};
  c.lse = c.kv_lengths = c.blocked_mask = c.additive_bias = c.softcap = true;
  c.paged_kv = c.ragged = c.sinks = c.alibi = c.value_head_dim = true;
  return c;
}

// The backward pass of everything a dense float problem can express (paged
// and int8 K/V have none; ragged batches are left to each backend).
inline BackwardCapabilities FullBackwardCapabilities() {
  BackwardCapabilities b;
  b.supported = true;
  b.dtypes = b.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  b.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
  b.kv_lengths = b.blocked_mask = b.additive_bias = b.bias_grad = b.softcap = true;
  b.deterministic = true;
  return b;
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_FULL_CAPABILITIES_H_

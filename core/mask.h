// Structured masks as key ranges. Every backend and the reference use these
// functions, so "which keys does query i see" has exactly one definition.
// Usable from CUDA device code (the macro expands to __host__ __device__).
#ifndef ATTNKIT_CORE_MASK_H_
#define ATTNKIT_CORE_MASK_H_

#include <cstdint>

#include "core/host_device.h"

namespace attnkit {

// A structured mask: query i sees key j iff
//   (left < 0  or j >= i + offset - left) and
//   (right < 0 or j <= i + offset + right) and j < kv_length,
// where offset = kv_length - q_len for bottom-right alignment, 0 for top-left.
// No mask is (-1, -1); causal is (-1, 0); a sliding window is (left, right).
struct MaskParams {
  int64_t left = -1;
  int64_t right = -1;
  bool bottom_right = false;
  int64_t q_len = 0;
};

// Half-open key range [begin, end) visible to query i in a sequence with
// kv_length valid keys; begin >= end means the row is fully blocked.
struct KeyRange {
  int64_t begin;
  int64_t end;
  ATTNKIT_HOST_DEVICE bool empty() const { return begin >= end; }
  ATTNKIT_HOST_DEVICE int64_t size() const { return begin >= end ? 0 : end - begin; }
};

// The key on query i's diagonal (i + offset above); ALiBi measures from it.
ATTNKIT_HOST_DEVICE inline int64_t Diagonal(const MaskParams& m, int64_t i, int64_t kv_length) {
  return i + (m.bottom_right ? kv_length - m.q_len : 0);
}

ATTNKIT_HOST_DEVICE inline KeyRange VisibleKeys(const MaskParams& m, int64_t i, int64_t kv_length) {
  const int64_t diag = Diagonal(m, i, kv_length);
  int64_t begin = 0;
  int64_t end = kv_length;
  if (m.left >= 0 && diag - m.left > begin) begin = diag - m.left;
  if (m.right >= 0 && diag + m.right + 1 < end) end = diag + m.right + 1;
  if (end < begin) end = begin;
  return KeyRange{begin, end};
}

// How a tile of queries [q0, q1) x keys [k0, k1) relates to the mask:
// fully hidden (skip it), fully visible (no per-element checks) or partial.
enum class TileVisibility { kHidden, kVisible, kPartial };

ATTNKIT_HOST_DEVICE inline TileVisibility ClassifyTile(const MaskParams& m, int64_t kv_length,
                                                       int64_t q0, int64_t q1, int64_t k0,
                                                       int64_t k1) {
  // Visible ranges are monotone in i: begin and end never decrease.
  const KeyRange first = VisibleKeys(m, q0, kv_length);
  const KeyRange last = VisibleKeys(m, q1 - 1, kv_length);
  const int64_t kend = k1 < kv_length ? k1 : kv_length;
  if (k0 >= kend) return TileVisibility::kHidden;
  // Hidden when every row's range ends before k0 or starts after the tile.
  if (last.end <= k0 || first.begin >= kend) return TileVisibility::kHidden;
  // Visible when every row's range covers [k0, k1) entirely.
  if (k1 <= kv_length && last.begin <= k0 && first.end >= k1) {
    return TileVisibility::kVisible;
  }
  return TileVisibility::kPartial;
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_MASK_H_

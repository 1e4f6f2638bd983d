// Which key tiles a block of packed query rows visits, shared by the CUDA
// kernels and their host tests (ATTNKIT_HOST_DEVICE, from core/mask.h).
//
// A block owns packed rows [r0, r1) of one KV head, row r = i * group + j
// for query i and query head j of the group, so it covers queries
// [r0 / group, (r1 - 1) / group]. Key tile t holds keys [t * block_n,
// (t + 1) * block_n).
#ifndef ATTNKIT_BACKENDS_CUDA_TILE_SCHEDULE_H_
#define ATTNKIT_BACKENDS_CUDA_TILE_SCHEDULE_H_

#include <cstdint>

#include "core/mask.h"

namespace attnkit {
namespace cuda {

// Half-open range of queries [first, end) covered by packed rows [r0, r1).
struct QuerySpan {
  int64_t first;
  int64_t end;
};

ATTNKIT_HOST_DEVICE inline QuerySpan QueriesOfRows(int64_t r0, int64_t r1, int64_t group) {
  return QuerySpan{r0 / group, (r1 - 1) / group + 1};
}

// Half-open range of key tiles [begin, end).
struct TileSpan {
  int64_t begin;
  int64_t end;
};

// The key tiles that can hold a key visible to any query in [q0, q1): visible
// ranges are monotone in the query, so the union lies between the first
// query's begin and the last query's end. Tiles inside the span may still be
// hidden for a sparse window; ClassifyTile says which.
ATTNKIT_HOST_DEVICE inline TileSpan KeyTileSpan(const MaskParams& m, int64_t kv_length, int64_t q0,
                                                int64_t q1, int64_t block_n) {
  const KeyRange first = VisibleKeys(m, q0, kv_length);
  const KeyRange last = VisibleKeys(m, q1 - 1, kv_length);
  if (last.end <= first.begin) return TileSpan{0, 0};
  return TileSpan{first.begin / block_n, (last.end + block_n - 1) / block_n};
}

// Split `split` of `num_splits` near-equal parts of `span` (possibly empty).
ATTNKIT_HOST_DEVICE inline TileSpan SplitTiles(TileSpan span, int num_splits, int split) {
  const int64_t n = span.end - span.begin;
  const int64_t per = (n + num_splits - 1) / num_splits;
  int64_t begin = span.begin + split * per;
  if (begin > span.end) begin = span.end;
  int64_t end = begin + per;
  if (end > span.end) end = span.end;
  return TileSpan{begin, end};
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_TILE_SCHEDULE_H_

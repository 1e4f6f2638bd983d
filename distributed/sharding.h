// How a sequence is split over the ranks of a distributed attention call.
//
// Contiguous: T rows in N equal chunks; rank r holds rows [r*T/N, (r+1)*T/N).
// Zigzag (causal self-attention): 2N equal chunks; rank r holds chunk r and
// then chunk 2N-1-r, so under a causal mask every rank owns the same number
// of visible (query, key) pairs (an early, cheap chunk and a late, costly
// one). A rank's local tensors hold its rows in that order: [B, H, T_local, d]
// with T_local = T / N.
#ifndef ATTNKIT_DISTRIBUTED_SHARDING_H_
#define ATTNKIT_DISTRIBUTED_SHARDING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/problem.h"

namespace attnkit {
namespace dist {

enum class Sharding { kContiguous, kZigzag };
absl::string_view ShardingName(Sharding s);  // "contiguous", "zigzag"

// One run of consecutive global rows held by a rank: global rows
// [begin, begin + rows) are local rows [local, local + rows).
struct RowRange {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t local = 0;
};

struct ShardLayout {
  Sharding sharding = Sharding::kContiguous;
  int num_ranks = 1;
  int64_t length = 0;  // T, the global sequence length
  // Rows per chunk: T / N (contiguous) or T / (2N) (zigzag).
  int64_t chunk() const;
  int64_t LocalRows() const { return length / num_ranks; }
  // Rank r's chunks in local order (one for contiguous, two for zigzag).
  std::vector<RowRange> Ranges(int rank) const;
};

// The layout of `length` rows over `num_ranks`; InvalidArgument naming
// `field` when length is not a positive multiple of N (contiguous) or 2N
// (zigzag).
absl::StatusOr<ShardLayout> MakeLayout(Sharding s, int num_ranks, int64_t length,
                                       absl::string_view field);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_SHARDING_H_

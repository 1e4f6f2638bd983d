// Moving a rank's rows between a full sequence tensor and its local shard.
// Tensors are [B, H, T, d] or [B, H, T] (lse) with the sequence at dim 2;
// `full` has T = layout.length rows, `local` layout.LocalRows(). Any dtype;
// both views must have the same dtype and the other dims equal.
#ifndef ATTNKIT_DISTRIBUTED_SHARD_ROWS_H_
#define ATTNKIT_DISTRIBUTED_SHARD_ROWS_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "distributed/sharding.h"

namespace attnkit {
namespace dist {

// local[:, :, i] = full[:, :, global row of local row i on `rank`].
absl::Status ExtractShard(const TensorView& full, const ShardLayout& layout, int rank,
                          const TensorView& local);
// full[:, :, global row] = local[:, :, i] for each of `rank`'s rows.
absl::Status InsertShard(const TensorView& local, const ShardLayout& layout, int rank,
                         const TensorView& full);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_SHARD_ROWS_H_

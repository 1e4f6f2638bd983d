#include "distributed/shard_rows.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/dtype.h"

namespace attnkit {
namespace dist {
namespace {

absl::Status CheckPair(const TensorView& full, const ShardLayout& layout, int rank,
                       const TensorView& local) {
  if (full.rank != local.rank || (full.rank != 3 && full.rank != 4) || full.dtype != local.dtype) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard rows: full %s and local %s must both be [B, H, T(, d)] of one "
                        "dtype",
                        full.DebugString(), local.DebugString()));
  }
  if (rank < 0 || rank >= layout.num_ranks || full.dim(2) != layout.length ||
      local.dim(2) != layout.LocalRows()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard rows: rank %d of %d: full T (%d) must be %d and local T (%d) must be %d", rank,
        layout.num_ranks, full.dim(2), layout.length, local.dim(2), layout.LocalRows()));
  }
  for (int i = 0; i < full.rank; ++i) {
    if (i != 2 && full.dim(i) != local.dim(i)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shard rows: dim %d differs: full %s, local %s", i, full.DebugString(),
                          local.DebugString()));
    }
  }
  return absl::OkStatus();
}

// Copies rows between the two views; `to_local` picks the direction.
absl::Status CopyRows(const TensorView& full, const ShardLayout& layout, int rank,
                      const TensorView& local, bool to_local) {
  if (absl::Status s = CheckPair(full, layout, rank, local); !s.ok()) return s;
  const size_t elem = DTypeSize(full.dtype);
  const int64_t width = full.rank == 4 ? full.dim(3) : 1;
  for (const RowRange& r : layout.Ranges(rank)) {
    for (int64_t b = 0; b < full.dim(0); ++b) {
      for (int64_t h = 0; h < full.dim(1); ++h) {
        for (int64_t t = 0; t < r.rows; ++t) {
          const int64_t f = full.Offset(b, h, r.begin + t), l = local.Offset(b, h, r.local + t);
          const int64_t fs = full.rank == 4 ? full.strides[3] : 1;
          const int64_t ls = local.rank == 4 ? local.strides[3] : 1;
          char* fp = static_cast<char*>(full.data);
          char* lp = static_cast<char*>(local.data);
          if (fs == 1 && ls == 1) {
            if (to_local) {
              std::memcpy(lp + l * elem, fp + f * elem, width * elem);
            } else {
              std::memcpy(fp + f * elem, lp + l * elem, width * elem);
            }
            continue;
          }
          for (int64_t c = 0; c < width; ++c) {
            char* a = fp + (f + c * fs) * elem;
            char* z = lp + (l + c * ls) * elem;
            if (to_local) {
              std::memcpy(z, a, elem);
            } else {
              std::memcpy(a, z, elem);
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExtractShard(const TensorView& full, const ShardLayout& layout, int rank,
                          const TensorView& local) {
  return CopyRows(full, layout, rank, local, /*to_local=*/true);
}

absl::Status InsertShard(const TensorView& local, const ShardLayout& layout, int rank,
                         const TensorView& full) {
  return CopyRows(full, layout, rank, local, /*to_local=*/false);
}

}  // namespace dist
}  // namespace attnkit

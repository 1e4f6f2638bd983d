#include "distributed/sharding.h"

#include "absl/strings/str_format.h"

namespace attnkit {
namespace dist {

absl::string_view ShardingName(Sharding s) {
  return s == Sharding::kZigzag ? "zigzag" : "contiguous";
}

int64_t ShardLayout::chunk() const {
  return sharding == Sharding::kZigzag ? length / (2 * num_ranks) : length / num_ranks;
}

std::vector<RowRange> ShardLayout::Ranges(int rank) const {
  const int64_t c = chunk();
  if (sharding == Sharding::kContiguous) return {RowRange{rank * c, c, 0}};
  return {RowRange{rank * c, c, 0}, RowRange{(2 * int64_t{num_ranks} - 1 - rank) * c, c, c}};
}

absl::StatusOr<ShardLayout> MakeLayout(Sharding s, int num_ranks, int64_t length,
                                       absl::string_view field) {
  if (num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the rank count (%d) must be at least 1", num_ranks));
  }
  const int64_t parts = s == Sharding::kZigzag ? 2 * int64_t{num_ranks} : num_ranks;
  if (length <= 0 || length % parts != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%d) must be a positive multiple of %d for %s sharding over %d ranks",
                        field, length, parts, ShardingName(s), num_ranks));
  }
  ShardLayout layout;
  layout.sharding = s;
  layout.num_ranks = num_ranks;
  layout.length = length;
  return layout;
}

}  // namespace dist
}  // namespace attnkit

#include "backends/highway/workspace.h"

#include "core/status_macros.h"

namespace attnkit {

absl::Status Workspace::Reserve(int threads, size_t per_thread_floats, size_t shared_floats) {
  const size_t thread_bytes = per_thread_floats * sizeof(float);
  if (per_thread_.size() < static_cast<size_t>(threads)) per_thread_.resize(threads);
  for (int t = 0; t < threads; ++t) {
    if (per_thread_[t].size() < thread_bytes) {
      // AlignedBuffer zero-fills, which also touches every page now rather
      // than inside the kernels.
      ATTNKIT_ASSIGN_OR_RETURN(per_thread_[t], AlignedBuffer::Allocate(thread_bytes));
    }
  }
  const size_t shared_bytes = shared_floats * sizeof(float);
  if (shared_.size() < shared_bytes) {
    ATTNKIT_ASSIGN_OR_RETURN(shared_, AlignedBuffer::Allocate(shared_bytes));
  }
  return absl::OkStatus();
}

size_t Workspace::bytes() const {
  size_t total = shared_.size();
  for (const AlignedBuffer& b : per_thread_) total += b.size();
  return total;
}

}  // namespace attnkit

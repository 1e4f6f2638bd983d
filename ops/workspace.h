// A growable f32 scratch buffer for hot paths: memory is allocated (and
// first-touched) only when a call needs more than any call before it, so a
// steady decode loop never allocates.
#ifndef ATTNKIT_OPS_WORKSPACE_H_
#define ATTNKIT_OPS_WORKSPACE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/status_macros.h"
#include "core/tensor.h"

namespace attnkit {

class FloatWorkspace {
 public:
  // At least `n` floats, 64-byte aligned; contents are unspecified.
  absl::StatusOr<float*> Get(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (bytes > buffer_.size()) {
      buffer_ = AlignedBuffer();  // release first: peak memory stays one buffer
      ATTNKIT_ASSIGN_OR_RETURN(buffer_, AlignedBuffer::Allocate(bytes));
    }
    return static_cast<float*>(buffer_.data());
  }

 private:
  AlignedBuffer buffer_;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_WORKSPACE_H_

// Grow-only scratch memory for the Highway backend: one area per thread and
// one shared area (split-K partials), allocated on first need and reused by
// every later call, so steady-state Forward calls never allocate or
// first-touch pages (~11 us per 4 KiB page on these machines).
#ifndef ATTNKIT_BACKENDS_HIGHWAY_WORKSPACE_H_
#define ATTNKIT_BACKENDS_HIGHWAY_WORKSPACE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace attnkit {

class Workspace {
 public:
  // Ensures `threads` areas of at least `per_thread_floats` floats each and a
  // shared area of `shared_floats`. Only allocates when growing.
  absl::Status Reserve(int threads, size_t per_thread_floats, size_t shared_floats);

  // 64-byte aligned; valid until the next Reserve that grows.
  float* thread_area(int thread) const { return static_cast<float*>(per_thread_[thread].data()); }
  float* shared_area() const { return static_cast<float*>(shared_.data()); }
  // Total bytes held, for reports.
  size_t bytes() const;

 private:
  std::vector<AlignedBuffer> per_thread_;
  AlignedBuffer shared_;
};

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_WORKSPACE_H_

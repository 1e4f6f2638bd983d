// One backend's attention calls from host views, whatever memory the backend
// uses. Host-memory backends read the views in place (no copy). Other
// backends get device buffers that are allocated on first use and grown only
// when a call needs more, inputs uploaded and o downloaded on every call.
#ifndef ATTNKIT_OPS_ATTENTION_RUNNER_H_
#define ATTNKIT_OPS_ATTENTION_RUNNER_H_

#include <array>
#include <memory>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {

class AttentionRunner {
 public:
  explicit AttentionRunner(Backend* backend) : backend_(backend) {}
  Backend* backend() const { return backend_; }

  // Runs `p` on `host` (q, k, v, o and optional kv_lengths; lse when asked)
  // and waits for the result. For device backends o and lse must be dense
  // within their span, since the whole span is downloaded.
  absl::Status Run(const AttentionProblem& p, const AttentionArgs& host, RunInfo* info);

 private:
  // Points *view at device memory of slot `slot` holding its span, uploaded
  // when `upload`.
  absl::Status Stage(int slot, bool upload, TensorView* view);

  Backend* backend_;
  std::array<std::unique_ptr<DeviceBuffer>, 8> buffers_;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_ATTENTION_RUNNER_H_

// One backend's attention calls from host views, whatever memory the backend
// uses. Host-memory backends read the views in place (no copy). Other
// backends get device buffers that are allocated on first use and grown only
// when a call needs more, inputs uploaded and o downloaded on every call;
// a KV cache is mirrored on the device and only its new rows are uploaded.
#ifndef ATTNKIT_OPS_ATTENTION_RUNNER_H_
#define ATTNKIT_OPS_ATTENTION_RUNNER_H_

#include <array>
#include <memory>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "ops/kv_cache.h"

namespace attnkit {

class AttentionRunner {
 public:
  explicit AttentionRunner(Backend* backend) : backend_(backend) {}
  Backend* backend() const { return backend_; }

  // Runs `p` on `host` (q, k, v, o and optional kv_lengths; lse when asked)
  // and waits for the result. For device backends o and lse must be dense
  // within their span, since the whole span is downloaded.
  absl::Status Run(const AttentionProblem& p, const AttentionArgs& host, RunInfo* info);

  // Run with host.k and host.v being cache->keys() and cache->values(). A
  // device backend keeps the whole cache (its capacity) in device memory and
  // gets only the rows written since the last call uploaded (a decode step's
  // new tokens), not the whole cache every step.
  absl::Status RunWithCache(const AttentionProblem& p, const AttentionArgs& host, KVCache* cache,
                            RunInfo* info);
  // Bytes uploaded to the backend so far (0 for host-memory backends).
  int64_t uploaded_bytes() const { return uploaded_bytes_; }

 private:
  // Stages every argument but k and v (Stage), runs, downloads o and lse.
  absl::Status RunStaged(const AttentionProblem& p, const AttentionArgs& host, AttentionArgs dev,
                         RunInfo* info);
  // Brings the device mirror of `cache` up to date (see RunWithCache).
  absl::Status SyncMirror(KVCache* cache);

  // Points *view at device memory of slot `slot` holding its span, uploaded
  // when `upload`.
  absl::Status Stage(int slot, bool upload, TensorView* view);

  Backend* backend_;
  std::array<std::unique_ptr<DeviceBuffer>, 8> buffers_;
  struct Mirror {
    uint64_t cache_id = 0;  // KVCache::id() it mirrors; 0 = none
    std::unique_ptr<DeviceBuffer> k, v;
  };
  Mirror mirror_;
  int64_t uploaded_bytes_ = 0;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_ATTENTION_RUNNER_H_

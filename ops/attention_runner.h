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

  // Run with host.k and host.v (and the int8 scales) being the cache's own
  // views, dense or paged. A device backend keeps the whole cache (its
  // capacity, or its page pool) in device memory and gets only the rows
  // written since the last call uploaded (a decode step's new tokens), not
  // the whole cache every step; a paged cache's block table is uploaded
  // with every call (the span of its [B, max_pages] view, rows num_pages
  // entries apart).
  absl::Status RunWithCache(const AttentionProblem& p, const AttentionArgs& host, KVCache* cache,
                            RunInfo* info);
  // Bytes uploaded to the backend so far (0 for host-memory backends).
  int64_t uploaded_bytes() const { return uploaded_bytes_; }

 private:
  // Stages every argument but k, v and their scales (Stage), runs,
  // downloads o and lse.
  absl::Status RunStaged(const AttentionProblem& p, const AttentionArgs& host, AttentionArgs dev,
                         RunInfo* info);
  // Brings the device mirror of `cache` up to date (see RunWithCache).
  absl::Status SyncMirror(KVCache* cache);

  // Points *view at device memory of slot `slot` holding its span, uploaded
  // when `upload`.
  absl::Status Stage(int slot, bool upload, TensorView* view);

  Backend* backend_;
  // Slots: 0 q, 1 k, 2 v, 3 o, 4 lse, 5 kv_lengths, 6 blocked_mask, 7 bias,
  // 8 block_table, 9 cu_seqlens_q, 10 cu_seqlens_k, 11 k_scale, 12 v_scale,
  // 13 sinks, 14 alibi_slopes.
  std::array<std::unique_ptr<DeviceBuffer>, 15> buffers_;
  struct Mirror {
    uint64_t cache_id = 0;  // KVCache::id() it mirrors; 0 = none
    std::unique_ptr<DeviceBuffer> k, v;
    std::unique_ptr<DeviceBuffer> k_scale, v_scale;  // int8 caches only
  };
  Mirror mirror_;
  int64_t uploaded_bytes_ = 0;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_ATTENTION_RUNNER_H_

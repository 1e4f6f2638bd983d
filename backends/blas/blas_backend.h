// The "blas" backend: attention as two cblas_sgemm calls per block of query
// rows (S = scale * Q K^T, O = P V) around a vectorised, max-subtracted
// softmax, on OpenBLAS. See block_plan.h for the blocking and
// attention_block.h for one block.
#ifndef ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_
#define ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/blas/block_plan.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace attnkit {

// Where the parallelism comes from.
enum class BlasThreading {
  // Work items (blocks) spread over the backend's own threads, each calling
  // single-threaded BLAS; falls back to kBlas when there are fewer items than
  // threads (e.g. decode with one kv head). The default: see blas_backend.cc.
  kAuto,
  // Always items over threads, single-threaded BLAS. OpenBLAS's thread count
  // is process-wide: it is 1 during the call and restored after it.
  kItems,
  kBlas,  // items in sequence on the caller, OpenBLAS's own threads in each GEMM
};

struct BlasOptions {
  // Upper bound on the scratch of all threads together, whatever the sequence
  // length; at least kMinBlasBudgetBytes.
  size_t memory_budget_bytes = size_t{64} << 20;
  int num_threads = 0;  // 0 = std::thread::hardware_concurrency()
  BlasThreading threading = BlasThreading::kAuto;
  // false runs each query head as its own GEMM over the same token blocks,
  // only to measure what stacking a group's heads buys.
  bool stack_group_heads = true;
  int64_t target_rows = 256;  // stacked query rows per GEMM (block_plan.h)
  int64_t max_key_chunk = 0;  // 0 = as many keys per S block as fit
  int64_t panel_rows = 64;    // query rows per causal-diagonal panel, 0 = none
};

constexpr size_t kMinBlasBudgetBytes = size_t{1} << 20;

class BlasBackend : public Backend {
 public:
  explicit BlasBackend(const BlasOptions& options = {});

  std::string Name() const override { return "blas"; }
  std::string Description() const override;
  Capabilities Caps() const override;
  // Caps, plus ResourceExhausted when the memory budget cannot hold even the
  // smallest block of `p`.
  absl::Status Supports(const AttentionProblem& p) const override;
  // Threads of the next Forward (ours, or OpenBLAS's in kBlas mode).
  absl::Status SetNumThreads(int n) override;
  int NumThreads() const override;

  // InvalidArgument below kMinBlasBudgetBytes. Takes effect on the next call;
  // a larger workspace already allocated is released then.
  absl::Status SetMemoryBudget(size_t bytes);
  size_t memory_budget() const;
  // The blocking and scratch bytes a Forward of `p` on tensors in p.layout
  // would use (f16/bf16 K/V are staged as f32 chunks).
  absl::StatusOr<blas::BlockPlan> PlanFor(const AttentionProblem& p) const;
  // Bytes of workspace allocated so far (it only grows, up to the budget).
  size_t workspace_bytes() const;

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override;

 private:
  absl::StatusOr<blas::BlockPlan> Plan(const AttentionProblem& p, bool stage_kv,
                                       bool* use_items) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string KernelName(const blas::BlockPlan& plan, bool use_items) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  BlasOptions options_ ABSL_GUARDED_BY(mu_);
  int num_threads_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(mu_);
  AlignedBuffer workspace_ ABSL_GUARDED_BY(mu_);
  // RunInfo::kernel of the last call, rebuilt only when the plan changes.
  std::string kernel_name_ ABSL_GUARDED_BY(mu_);
  blas::BlockPlan kernel_plan_ ABSL_GUARDED_BY(mu_);
  bool kernel_use_items_ ABSL_GUARDED_BY(mu_) = false;
};

std::unique_ptr<Backend> MakeBlasBackend(const BlasOptions& options = {});

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_

// The "blas" backend: attention as two GEMMs per block of query rows
// (S = scale * Q K^T, O = P V) around a vectorised, max-subtracted softmax,
// on OpenBLAS; the same class with oneDNN's matmul as its GEMM library is the
// "onednn" backend (BlasOptions::engine, backends/onednn/). See block_plan.h for the blocking and
// attention_block.h for one block. Paged and int8 K/V are gathered and
// dequantized into the f32 chunks the GEMMs read, unless the engine
// multiplies them as stored (FAST's int8 Q.K and u8-weight P.V, 16-bit
// GEMMs: BlockContext::qk_type, pv_type); a ragged batch runs as its
// sequences (core/ragged.h), whose blocks share one work list.
#ifndef ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_
#define ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "backends/blas/attention_block.h"
#include "backends/blas/block_plan.h"
#include "backends/blas/gemm_engine.h"
#include "core/backend.h"
#include "core/ragged.h"
#include "core/tensor.h"
#include "platform/thread_pool.h"

namespace attnkit {

// Where the parallelism comes from.
enum class BlasThreading {
  // Work items (blocks) spread over the backend's own threads, each calling
  // single-threaded BLAS; falls back to kBlas when there are fewer items than
  // threads (e.g. decode with one kv head). The default: see blas_backend.cc.
  kAuto,
  // Always items over threads, single-threaded GEMMs. The library's thread
  // count (process-wide for OpenBLAS) is 1 during the call, restored after.
  kItems,
  kBlas,  // items in sequence on the caller, the library's own threads in each GEMM
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
  // Stacked query rows per GEMM (block_plan.h); <= 0: kDefaultTargetRows, or
  // the engine's GemmEngine::PreferredRows16 where Q.K is a 16-bit GEMM.
  int64_t target_rows = 0;
  int64_t max_key_chunk = 0;  // 0 = as many keys per S block as fit
  int64_t panel_rows = 64;    // query rows per causal-diagonal panel, 0 = none
  // The GEMM library, which also names the backend (gemm_engine.h); null =
  // OpenBLAS ("blas").
  std::shared_ptr<blas::GemmEngine> engine;
};

constexpr size_t kMinBlasBudgetBytes = size_t{1} << 20;
constexpr int64_t kDefaultTargetRows = 256;

class BlasBackend : public Backend {
 public:
  explicit BlasBackend(const BlasOptions& options = {});

  std::string Name() const override { return engine_->BackendName(); }
  std::string Description() const override;
  Capabilities Caps() const override;
  // Caps, plus ResourceExhausted when the memory budget cannot hold even the
  // smallest block of `p`.
  absl::Status Supports(const AttentionProblem& p) const override;
  // Threads of the next Forward (ours, or the library's in kBlas mode).
  absl::Status SetNumThreads(int n) override;
  int NumThreads() const override;

  // InvalidArgument below kMinBlasBudgetBytes. Takes effect on the next call;
  // a larger workspace already allocated is released then.
  absl::Status SetMemoryBudget(size_t bytes);
  size_t memory_budget() const;
  // The blocking and scratch bytes a Forward of `p` on tensors in p.layout
  // would use (16-bit, int8 and paged K/V are staged as f32 chunks). For a
  // ragged batch: the blocking of a sequence of the largest lengths.
  absl::StatusOr<blas::BlockPlan> PlanFor(const AttentionProblem& p) const;
  // Bytes of workspace allocated so far (it only grows, up to the budget).
  size_t workspace_bytes() const;

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override;
  // backward.h: (b, g) items over our threads (or, fewer pairs than threads
  // or a budget too small for all keys, key spans then query blocks).
  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                            const GradArgs& grads, RunInfo* info) override;

 private:
  // Plans every segment (ctx.problem, ctx.args) for the threading mode;
  // *use_items: blocks over our threads, else the library's threads.
  absl::Status Plan(absl::Span<blas::BlockContext> segments, bool* use_items) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sets each segment's plan for `workers` scratch regions; returns the work
  // items of all segments together.
  absl::StatusOr<int64_t> PlanEach(absl::Span<blas::BlockContext> segments, int workers) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // segments_ = the problem itself, or each sequence of a ragged batch as a
  // batch-1 dense or paged problem with views into the packed tensors.
  void SetSegments(const AttentionProblem& p, const AttentionArgs& args,
                   const std::vector<SequenceCall>& sequences) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After Plan: numbers the segments' items (segment_ends_) and grows the
  // workspace to the largest segment's scratch, which it returns (null when
  // there is no segment).
  absl::StatusOr<const blas::BlockPlan*> PrepareWorkspace() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the blocks of segments_ (planned), items numbered segment by segment.
  void RunSegments(bool use_items) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `sequences`: those of a ragged batch, 0 for a batch of equal lengths.
  // qk, pv: the products' operand types (BlockContext::qk_type, pv_type).
  std::string KernelName(const blas::BlockPlan& plan, bool use_items, size_t sequences, DType qk,
                         DType pv) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Rebuilds kernel_name_ only when the plan, the threading or the
  // sequence count changed.
  void UpdateKernelName(const blas::BlockPlan& plan, bool use_items, size_t sequences, DType qk,
                        DType pv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<blas::GemmEngine> engine_;  // set once, thread-safe
  mutable absl::Mutex mu_;
  BlasOptions options_ ABSL_GUARDED_BY(mu_);
  int num_threads_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(mu_);
  AlignedBuffer workspace_ ABSL_GUARDED_BY(mu_);
  // The problems of the current call: the whole one, or a ragged batch's
  // sequences; segment_ends_[s] is one past segment s's last work item.
  // Filled and emptied by each call; members so that their capacity is reused.
  std::vector<blas::BlockContext> segments_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> segment_ends_ ABSL_GUARDED_BY(mu_);
  // RunInfo::kernel of the last call, rebuilt only when the plan changes.
  std::string kernel_name_ ABSL_GUARDED_BY(mu_);
  blas::BlockPlan kernel_plan_ ABSL_GUARDED_BY(mu_);
  bool kernel_use_items_ ABSL_GUARDED_BY(mu_) = false;
  size_t kernel_sequences_ ABSL_GUARDED_BY(mu_) = 0;
  DType kernel_qk_ ABSL_GUARDED_BY(mu_) = DType::kF32;
  DType kernel_pv_ ABSL_GUARDED_BY(mu_) = DType::kF32;
};

std::unique_ptr<Backend> MakeBlasBackend(const BlasOptions& options = {});

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_BLAS_BACKEND_H_

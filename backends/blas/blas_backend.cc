#include "backends/blas/blas_backend.h"

#include <algorithm>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "backends/blas/attention_block.h"
#include "backends/blas/backward.h"
#include "backends/blas/openblas_engine.h"
#include "backends/blas/row_ops.h"
#include "core/full_capabilities.h"
#include "core/ragged.h"
#include "core/sinks_grad.h"
#include "core/status_macros.h"

namespace attnkit {

// Threading choice: blocks over our own threads, each GEMM single-threaded
// (BlasThreading::kItems, what kAuto picks). Why:
//  - the softmax between the two GEMMs (~5-10% of the time) then runs on
//    every core; with OpenBLAS's threads it runs on one while the others spin;
//  - items are independent (own rows, own scratch), so there is no barrier
//    inside a block, only load imbalance on the last few of ~100 items;
//  - measured (benchmarks/blas_bench.cc, 2 threads, OpenBLAS core "Zen", on
//    the shared 2-core machine at load average 5-7): per round of random
//    interleaving, OpenBLAS-threads mode took 1.036x (H=16 T=2048 d=64, no
//    mask) and 1.016x (causal) the time of items mode, medians of 9 rounds;
//    the spread per round (0.89-1.57) is mostly other jobs' noise, so the
//    measured gain is small; the structural reasons above decide it.
// With fewer items than threads (decode against one kv head) only OpenBLAS's
// threads can use the other cores, so kAuto switches to kBlas there.
namespace {

int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

BlasBackend::BlasBackend(const BlasOptions& options)
    : engine_(options.engine != nullptr ? options.engine : blas::MakeOpenBlasEngine()),
      options_(options),
      num_threads_(ResolveThreads(options.num_threads)) {
  options_.engine = nullptr;  // engine_ holds it
  options_.memory_budget_bytes = std::max(options_.memory_budget_bytes, kMinBlasBudgetBytes);
  pool_ = std::make_unique<ThreadPool>(num_threads_);
  blas::RowOpsTarget();  // picks the Highway target once, before any worker runs
}

std::string BlasBackend::Description() const {
  const std::string remarks = engine_->Remarks();
  return absl::StrFormat(
      "%s GEMMs over blocks of stacked query rows, Highway softmax; scratch <= %d MiB%s%s",
      engine_->Library(), memory_budget() >> 20, remarks.empty() ? "" : "; ", remarks);
}

Capabilities BlasBackend::Caps() const {
  Capabilities c = FullCapabilities();
  c.fast_kv_dtypes = blas::FastKvTypes(*engine_);
  BackwardCapabilities& b = c.backward;  // backward.h; dense K/V in a float type
  b.supported = true;
  b.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  b.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  b.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
  b.kv_lengths = b.blocked_mask = b.additive_bias = b.bias_grad = b.softcap = true;
  b.sinks = true;           // P from the forward's lse, which holds the sink; core/sinks_grad.h
  b.alibi = true;           // the term added with the bias (backward.cc ProbabilityRow)
  b.value_head_dim = true;  // dP = dO V^T and dV over Ev, the rest over E
  b.deterministic = true;   // items own disjoint outputs; their order is fixed by the shape
  return c;
}

absl::Status BlasBackend::Supports(const AttentionProblem& p) const {
  ATTNKIT_RETURN_IF_ERROR(Backend::Supports(p));
  return PlanFor(p).status();
}

absl::Status BlasBackend::SetNumThreads(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("thread count (%d) must be >= 1", n));
  }
  absl::MutexLock lock(&mu_);
  if (n != num_threads_) {
    pool_.reset();
    pool_ = std::make_unique<ThreadPool>(n);
    num_threads_ = n;
    kernel_name_.clear();
  }
  return absl::OkStatus();
}

int BlasBackend::NumThreads() const {
  absl::ReaderMutexLock lock(&mu_);
  return num_threads_;
}

absl::Status BlasBackend::SetMemoryBudget(size_t bytes) {
  if (bytes < kMinBlasBudgetBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "blas memory budget (%d bytes) must be at least %d bytes", bytes, kMinBlasBudgetBytes));
  }
  absl::MutexLock lock(&mu_);
  options_.memory_budget_bytes = bytes;
  return absl::OkStatus();
}

size_t BlasBackend::memory_budget() const {
  absl::ReaderMutexLock lock(&mu_);
  return options_.memory_budget_bytes;
}

size_t BlasBackend::workspace_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return workspace_.size();
}

absl::StatusOr<blas::BlockPlan> BlasBackend::PlanFor(const AttentionProblem& p) const {
  absl::ReaderMutexLock lock(&mu_);
  AttentionProblem one = p;  // a ragged batch: one sequence of the largest lengths
  if (p.is_ragged()) {
    one.batch = 1;
    one.q_lengths.clear();
    one.kv_lengths.clear();
  }
  blas::BlockContext ctx;
  ctx.problem = &one;  // args null: tensors in p.layout
  bool use_items = false;
  ATTNKIT_RETURN_IF_ERROR(Plan(absl::MakeSpan(&ctx, 1), &use_items));
  return ctx.plan;
}

absl::StatusOr<int64_t> BlasBackend::PlanEach(absl::Span<blas::BlockContext> segments,
                                              int workers) const {
  blas::PlanOptions o;
  o.budget_bytes = options_.memory_budget_bytes;
  o.max_key_chunk = options_.max_key_chunk;
  o.panel_rows = options_.panel_rows;
  o.stack_heads = options_.stack_group_heads;
  o.workers = workers;
  int64_t items = 0;
  const int64_t rows16 = engine_->PreferredRows16();
  for (blas::BlockContext& ctx : segments) {
    o.target_rows = options_.target_rows;  // asked for: as is
    if (o.target_rows <= 0) {
      const bool rows16_apply = rows16 > 0 && blas::MultipliesQK16(*ctx.problem, *engine_);
      o.target_rows = rows16_apply ? rows16 : kDefaultTargetRows;
    }
    o.stage_kv = blas::StagesKv(*ctx.problem, ctx.args);
    o.u8_weights = blas::TakesU8Weights(*ctx.problem, *engine_);
    ATTNKIT_ASSIGN_OR_RETURN(ctx.plan, blas::MakePlan(*ctx.problem, o));
    items += ctx.plan.NumItems(*ctx.problem);
  }
  return items;
}

absl::Status BlasBackend::Plan(absl::Span<blas::BlockContext> segments, bool* use_items) const {
  const int workers = options_.threading == BlasThreading::kBlas ? 1 : num_threads_;
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t items, PlanEach(segments, workers));
  *use_items = options_.threading != BlasThreading::kBlas;
  if (options_.threading == BlasThreading::kAuto && workers > 1 && items < workers) {
    *use_items = false;  // one scratch region: blocks may be larger
    ATTNKIT_RETURN_IF_ERROR(PlanEach(segments, 1).status());
  }
  return absl::OkStatus();
}

std::string BlasBackend::KernelName(const blas::BlockPlan& plan, bool use_items, size_t sequences,
                                    DType qk, DType pv) const {
  // The products' operand types when either is not f32 (K/V then read in
  // their storage type), else whether K/V are widened into f32 chunks.
  const std::string operands =
      qk != DType::kF32 || pv != DType::kF32
          ? absl::StrFormat("; products qk=%s pv=%s", DTypeName(qk),
                            pv == DType::kI8 ? "u8" : DTypeName(pv))  // u8 weights, s8 V
          : (plan.stage_kv ? "; kv staged to f32" : "");
  return absl::StrFormat(
      "%s %s x%d; rows %dx%d keys<=%d panel %d; %s; softmax/%s%s%s", engine_->KernelTag(),
      use_items ? "blocks-over-threads (1-thread GEMMs)" : "library-threads", num_threads_,
      plan.head_block, plan.token_block, plan.key_chunk, plan.panel_tokens,
      options_.stack_group_heads ? "gqa-stacked" : "per-head", blas::RowOpsTarget(), operands,
      sequences > 0 ? absl::StrFormat("; ragged, %d sequences in one work list", sequences) : "");
}

void BlasBackend::RunSegments(bool use_items) {
  // Every segment's plan has the same worker count; a worker's region holds
  // the largest segment's scratch.
  const std::vector<blas::BlockContext>& segments = segments_;
  const std::vector<int64_t>& ends = segment_ends_;
  size_t region = 0;
  for (const blas::BlockContext& ctx : segments) region = std::max(region, ctx.plan.worker_bytes);
  char* base = static_cast<char*>(workspace_.data());
  auto run = [&](int64_t item, int worker) {
    const size_t s =
        static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), item) - ends.begin());
    const blas::BlockContext& ctx = segments[s];
    const blas::WorkerScratch scratch = blas::CarveScratch(
        ctx.plan, ctx.problem->head_dim, ctx.problem->value_dim(), base + worker * region);
    blas::ComputeBlock(ctx, s == 0 ? item : item - ends[s - 1], scratch);
  };
  const int64_t items = ends.empty() ? 0 : ends.back();
  if (use_items) {
    blas::ScopedGemmThreads gemm_threads(engine_.get(), 1);
    pool_->Run(items, run);
  } else {
    blas::ScopedGemmThreads gemm_threads(engine_.get(), num_threads_);
    for (int64_t item = 0; item < items; ++item) run(item, 0);
  }
}

void BlasBackend::SetSegments(const AttentionProblem& p, const AttentionArgs& args,
                              const std::vector<SequenceCall>& sequences) {
  segments_.clear();
  auto add = [this](const AttentionProblem& sp, const AttentionArgs& sa) {
    blas::BlockContext ctx;
    ctx.problem = &sp;
    ctx.args = &sa;
    ctx.engine = engine_.get();
    blas::ChooseOperandTypes(&ctx);
    ctx.mask = sp.mask_params();
    ctx.kv_rows = KvRows(sp, sa);
    ctx.q_in_place = sa.q.dtype == DType::kF32 && sa.q.strides[3] == 1;
    segments_.push_back(ctx);
  };
  if (!p.is_ragged()) {
    add(p, args);
    return;
  }
  for (const SequenceCall& s : sequences) add(s.problem, s.args);
}

absl::StatusOr<const blas::BlockPlan*> BlasBackend::PrepareWorkspace() {
  segment_ends_.clear();
  size_t total_bytes = 0;
  const blas::BlockPlan* largest = nullptr;
  for (const blas::BlockContext& ctx : segments_) {
    segment_ends_.push_back((segment_ends_.empty() ? 0 : segment_ends_.back()) +
                            ctx.plan.NumItems(*ctx.problem));
    if (largest == nullptr || ctx.plan.total_bytes() > total_bytes) {
      largest = &ctx.plan;
      total_bytes = ctx.plan.total_bytes();
    }
  }
  // Allocated (and zero-filled, so first-touched) only when a call needs more
  // than the last one, or the budget shrank below it.
  if (workspace_.size() < total_bytes || workspace_.size() > options_.memory_budget_bytes) {
    workspace_ = AlignedBuffer();
    ATTNKIT_ASSIGN_OR_RETURN(workspace_, AlignedBuffer::Allocate(total_bytes));
  }
  return largest;
}

absl::Status BlasBackend::ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                      RunInfo* info) {
  absl::MutexLock lock(&mu_);
  std::vector<SequenceCall> sequences;
  if (p.is_ragged()) sequences = RaggedSequences(p, args);
  SetSegments(p, args, sequences);
  absl::Cleanup forget_segments = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    segments_.clear();  // they point into this call's arguments
  };
  // Dense f32 K/V are read in place when BLAS can (blas::StagesKv): V rows
  // some row must not read (NaN or Inf under a mask) are left out of the
  // GEMMs (attention_block.cc).
  bool use_items = false;
  ATTNKIT_RETURN_IF_ERROR(Plan(absl::MakeSpan(segments_), &use_items));
  ATTNKIT_ASSIGN_OR_RETURN(const blas::BlockPlan* largest, PrepareWorkspace());
  RunSegments(use_items);
  ATTNKIT_RETURN_IF_ERROR(engine_->TakeError());
  if (largest != nullptr) {
    UpdateKernelName(*largest, use_items, sequences.size(), segments_.front().qk_type,
                     segments_.front().pv_type);
  }
  info->kernel = kernel_name_;
  return absl::OkStatus();
}

absl::Status BlasBackend::BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                       const GradArgs& grads, RunInfo* info) {
  absl::MutexLock lock(&mu_);
  const bool use_items = options_.threading != BlasThreading::kBlas;
  blas::BackwardOptions o;
  o.budget_bytes = options_.memory_budget_bytes;
  o.workers = use_items ? num_threads_ : 1;
  // The forward's row and key limits cap the backward's own defaults.
  if (options_.target_rows > 0) o.target_rows = std::min(o.target_rows, options_.target_rows);
  if (options_.max_key_chunk > 0) o.key_chunk = std::min(o.key_chunk, options_.max_key_chunk);
  o.gemm16 = blas::Gemm16Type(p, *engine_);           // S and dP in 16 bits where exact
  o.round16 = blas::RoundsGradOperands(p, *engine_);  // FAST: dV, dK, dQ too
  ATTNKIT_ASSIGN_OR_RETURN(const blas::BackwardPlan plan, blas::MakeBackwardPlan(p, o));
  // The forward's workspace, grown when the backward needs more.
  if (workspace_.size() < plan.total_bytes() || workspace_.size() > options_.memory_budget_bytes) {
    workspace_ = AlignedBuffer();
    ATTNKIT_ASSIGN_OR_RETURN(workspace_, AlignedBuffer::Allocate(plan.total_bytes()));
  }
  void* workspace = workspace_.data();
  for (int phase = 0; phase < 2; ++phase) {  // phase 1: kPartitioned's merge
    auto run = [&](int64_t item, int worker) {
      blas::ComputeBackwardItem(p, args, grads, plan, phase, item, engine_.get(), workspace,
                                worker);
    };
    const int64_t items = plan.NumItems(p, phase);
    if (use_items) {
      blas::ScopedGemmThreads gemm_threads(engine_.get(), 1);
      pool_->Run(items, run);
    } else {
      blas::ScopedGemmThreads gemm_threads(engine_.get(), num_threads_);
      for (int64_t item = 0; item < items; ++item) run(item, 0);
    }
    ATTNKIT_RETURN_IF_ERROR(engine_->TakeError());
  }
  ATTNKIT_RETURN_IF_ERROR(SinkGradient(p, args, grads));  // dsinks, when asked for
  info->kernel =
      absl::StrFormat("backward %s %s x%d; %s", engine_->KernelTag(),
                      use_items ? "items-over-threads (1-thread GEMMs)" : "library-threads",
                      num_threads_, blas::DescribeBackwardPlan(plan));
  return absl::OkStatus();
}

void BlasBackend::UpdateKernelName(const blas::BlockPlan& plan, bool use_items, size_t sequences,
                                   DType qk, DType pv) {
  const blas::BlockPlan& k = kernel_plan_;
  if (kernel_name_.empty() || use_items != kernel_use_items_ || sequences != kernel_sequences_ ||
      qk != kernel_qk_ || pv != kernel_pv_ || plan.head_block != k.head_block ||
      plan.token_block != k.token_block || plan.key_chunk != k.key_chunk ||
      plan.panel_tokens != k.panel_tokens || plan.stage_kv != k.stage_kv) {
    kernel_name_ = KernelName(plan, use_items, sequences, qk, pv);
    kernel_plan_ = plan;
    kernel_qk_ = qk;
    kernel_pv_ = pv;
    kernel_use_items_ = use_items;
    kernel_sequences_ = sequences;
  }
}

std::unique_ptr<Backend> MakeBlasBackend(const BlasOptions& options) {
  return std::make_unique<BlasBackend>(options);
}

}  // namespace attnkit

#include "backends/highway/highway_backend.h"

#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backends/highway/backward.h"
#include "backends/highway/flash_params.h"
#include "backends/highway/sdpa.h"
#include "backends/highway/workspace.h"
#include "core/full_capabilities.h"
#include "core/ragged.h"
#include "core/sinks_grad.h"
#include "core/status_macros.h"
#include "hwy/targets.h"
#include "platform/thread_pool.h"

namespace attnkit {
namespace {

int ThreadsFromOptions(const HighwayOptions& o) {
  if (o.num_threads > 0) return o.num_threads;
  if (const char* env = std::getenv("ATTNKIT_HWY_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return 0;  // ThreadPool: one per hardware thread
}

class HighwayBackend : public Backend {
 public:
  explicit HighwayBackend(const HighwayOptions& options)
      : name_(options.name), pool_(std::make_unique<ThreadPool>(ThreadsFromOptions(options))) {
    // An explicit target is called through the dispatch table directly.
    // $ATTNKIT_HWY_TARGET already caps dynamic dispatch for the whole process
    // (platform/hwy_target_cap.h), which then picks exactly that target; here it
    // only has to exist on this CPU, or the backend says why not.
    const char* env = std::getenv("ATTNKIT_HWY_TARGET");
    const bool from_env = options.target.empty() && env != nullptr && *env != '\0';
    const std::string target = from_env ? env : options.target;
    if (!target.empty()) {
      absl::StatusOr<int64_t> parsed = ParseFlashTarget(target);
      if (!parsed.ok()) {
        available_ = parsed.status();
      } else {
        (from_env ? env_target_ : forced_target_) = *parsed;
      }
    }
  }

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return absl::StrCat(
        "flash attention (online softmax, fp32 accumulate) with Highway SIMD; target ",
        forced_target_ != 0 ? absl::StrCat(hwy::TargetName(forced_target_), " (forced)")
        : env_target_ != 0  ? absl::StrCat(hwy::TargetName(env_target_), " (ATTNKIT_HWY_TARGET)")
                            : "chosen at run time",
        ", ", pool_->num_threads(), " threads");
  }
  Capabilities Caps() const override {
    Capabilities c = FullCapabilities();
    // Each output row is reduced by one worker in a fixed key order, so the
    // thread count only changes which worker runs it (1 and 2 threads agree).
    c.deterministic = true;
    // FAST rounds Q to K's type (fp8: bf16) on every target
    // (tile_loads-inl.h); where the CPU has them, bf16 dot products multiply
    // bf16 Q.K and P.V, and fp8 decode's codes widened to bf16.
    c.fast_kv_dtypes = {DType::kF16, DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2};
    // Backward (backward-inl.h): dense K/V in a float type, every mask and
    // per-pair input; dQ partials are merged in a fixed order.
    BackwardCapabilities& bw = c.backward;
    bw.supported = true;
    bw.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    bw.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    bw.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    bw.kv_lengths = bw.blocked_mask = bw.additive_bias = bw.bias_grad = bw.softcap = true;
    bw.ragged = false;
    // Sinks: P from the forward's lse (which holds the sink) is all dQ, dK
    // and dV need; dsinks from O, dO and lse (core/sinks_grad.h).
    bw.sinks = true;
    bw.alibi = true;           // the term added with the bias (backward-inl.h PairInputs)
    bw.value_head_dim = true;  // dP = dO V^T and dV over Ev (BwdPlan::dvp)
    bw.deterministic = true;
    return c;
  }
  absl::Status Available() const override { return available_; }

  // Replaces the pool only when the count changes; never on the hot path.
  absl::Status SetNumThreads(int n) override {
    if (n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("thread count (", n, ") must be >= 1"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (n != pool_->num_threads()) pool_ = std::make_unique<ThreadPool>(n);
    return absl::OkStatus();
  }
  int NumThreads() const override { return pool_->num_threads(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    // The workspace and pool serve one call at a time.
    std::lock_guard<std::mutex> lock(mu_);
    FlashRunInfo run;
    if (p.is_ragged()) {
      // One parallel loop over every sequence's work (ragged_schedule.h).
      const std::vector<SequenceCall> seqs = RaggedSequences(p, a);
      std::vector<FlashParams> params;
      params.reserve(seqs.size());
      for (const SequenceCall& s : seqs) params.push_back(MakeFlashParams(s.problem, s.args));
      ATTNKIT_RETURN_IF_ERROR(FlashAttention(params.data(), params.size(), forced_target_,
                                             pool_.get(), &workspace_, &run));
    } else {
      const FlashParams params = MakeFlashParams(p, a);
      ATTNKIT_RETURN_IF_ERROR(
          FlashAttention(params, forced_target_, pool_.get(), &workspace_, &run));
    }
    info->kernel = run.Describe();
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g,
                            RunInfo* info) override {
    std::lock_guard<std::mutex> lock(mu_);
    const FlashParams params = MakeFlashParams(p, a);
    BackwardRunInfo run;
    ATTNKIT_RETURN_IF_ERROR(FlashAttentionBackward(params, MakeFlashGradParams(g), forced_target_,
                                                   pool_.get(), &workspace_, &run));
    ATTNKIT_RETURN_IF_ERROR(SinkGradient(p, a, g));  // dsinks, when asked for
    info->kernel = run.Describe();
    return absl::OkStatus();
  }

 private:
  std::string name_;
  absl::Status available_;
  int64_t forced_target_ = 0;  // HighwayOptions::target; 0 = dynamic dispatch
  int64_t env_target_ = 0;     // $ATTNKIT_HWY_TARGET, applied as a dispatch cap
  std::mutex mu_;
  std::unique_ptr<ThreadPool> pool_;
  Workspace workspace_;
};

}  // namespace

std::unique_ptr<Backend> MakeHighwayBackend(const HighwayOptions& options) {
  return std::make_unique<HighwayBackend>(options);
}

}  // namespace attnkit

// The multi-head attention layer:
//   Q = x Wq^T   [B, T, H*d]      K = c Wk^T [B, Tk, Hkv*d], V = c Wv^T [B, Tk, Hkv*dv]
//   O = attention(Q, K, V) through the selected backend     [B, T, H*dv]
//   y = O Wo^T   [B, T, D]
// (dv: the config's value_head_dim, d unless set.)
// with c = x (self-attention) or a second input (cross-attention, Tq != Tk).
// The head split is a strided view: the projection output [B, T, H*d] is read
// as [B, H, T, d] with BTHD strides, and the attention output is written the
// same way, so the merge back to [B, T, H*d] is free.
//
// Weights use PyTorch's nn.Linear orientation, [out, in]: Wq [H*d, D],
// Wk [Hkv*d, D] and Wv [Hkv*dv, D] (GQA/MQA shrink them), Wo [D, H*dv];
// biases [out].
// A layer exported from PyTorch loads with LoadNpy() straight from
// `layer.q_proj.weight.detach().numpy()` and friends, no transpose.
#ifndef ATTNKIT_OPS_MULTI_HEAD_ATTENTION_H_
#define ATTNKIT_OPS_MULTI_HEAD_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "core/problem.h"
#include "core/problem_config.h"
#include "core/tensor.h"
#include "ops/attention_runner.h"
#include "ops/kv_cache.h"
#include "ops/matmul.h"
#include "ops/parameter.h"
#include "ops/workspace.h"
#include "plugin/registry.h"

namespace attnkit {

struct LayerOptions {
  bool bias = false;   // projections with bias vectors (off, as in most LLMs)
  uint64_t seed = 0;   // initial weights: U(-1/sqrt(in), 1/sqrt(in)), like nn.Linear
  std::string matmul;  // a provider name; "" = MatmulForBackend(backend)
  // The thread count the backends run with, which `auto` reads its tuning
  // record for (0 = every core).
  int threads = 0;
};

// f32, contiguous, [out, in].
struct AttentionWeights {
  Tensor wq, wk, wv, wo;  // [H*d, D], [Hkv*d, D], [Hkv*dv, D], [D, H*dv]
  Tensor bq, bk, bv, bo;  // [H*d], [Hkv*d], [Hkv*dv], [D]; empty without bias
  // [H] with config sinks: the learned sink logits (gpt-oss's `sinks`),
  // initially 0; a parameter with a gradient.
  Tensor sinks;
  // [H] with config alibi: the ALiBi slopes, initially DefaultAlibiSlopes
  // (core/alibi.h); constants (no gradient), replaceable by SetWeight.
  Tensor alibi_slopes;
};

class MultiHeadAttention {
 public:
  // Validates the config for the layer (every ProblemFromConfig rule, plus
  // model_dim divisible by num_heads and f32 activations), selects the
  // backend named by config.backend ("auto": the first in DefaultAutoOrder()
  // that supports the layer's problem) and its matmul, and initialises the
  // weights from options.seed. q_len/kv_len in the config are not used.
  static absl::StatusOr<std::unique_ptr<MultiHeadAttention>> Create(
      const AttentionConfig& config, const LayerOptions& options, const BackendRegistry& registry);

  // Reads wq.npy, wk.npy, wv.npy, wo.npy (and bq/bk/bv/bo.npy when the layer
  // has bias) from `dir`: f32 or f16, shapes as in AttentionWeights.
  // InvalidArgument naming the file, its shape and the expected shape.
  absl::Status LoadNpy(const std::string& dir);
  // Copies one matrix or bias ("wq", ..., "bo") from any f32/f16 view of the
  // expected shape.
  absl::Status SetWeight(const std::string& name, const TensorView& value);

  // Self-attention. x, y: f32 [B, T, D] views with a contiguous last dim
  // (token slices of a longer buffer work); y may be x.
  absl::Status Forward(const TensorView& x, const TensorView& y);
  // Cross-attention: queries from x [B, Tq, D], keys and values from
  // context [B, Tk, D]; the score matrix is Tq x Tk.
  absl::Status CrossForward(const TensorView& x, const TensorView& context, const TensorView& y);
  // Appends the keys and values of x's T tokens to `cache`, then every new
  // query attends to all cached tokens of its sequence (bottom-right causal
  // alignment unless the config says TOP_LEFT): T = 1 is a decode step, T > 1
  // a chunked prefill. The cache may be dense or paged (the backend then
  // gets the page pool and block tables), f32, f16, bf16 or int8 (the
  // backend gets the scales). ResourceExhausted, with the cache unchanged,
  // when the cache is too small (dense) or out of pages (paged).
  absl::Status ForwardCached(const TensorView& x, KVCache* cache, const TensorView& y);
  // A dense cache for this layer's KV heads, head_dim and value head dim.
  absl::StatusOr<KVCache> NewCache(int64_t batch, int64_t capacity,
                                   DType dtype = DType::kF32) const;
  // A paged cache: num_pages pages of page_size tokens shared by the batch.
  absl::StatusOr<KVCache> NewPagedCache(int64_t batch, int64_t page_size, int64_t num_pages,
                                        DType dtype = DType::kF32) const;

  // Training (self-attention). ForwardTrain is Forward that also keeps what
  // Backward needs, in buffers of its own (Forward, CrossForward and cached
  // calls in between leave them alone): x [B*T, D] (copied), Q [B*T, H*d],
  // K and V [B*T, Hkv*d], O [B*T, H*d] and the log-sum-exp [B, H, T] (the
  // attention runs with return_lse). The backend must run the backward pass
  // of the problem on host memory: checked before anything runs.
  absl::Status ForwardTrain(const TensorView& x, const TensorView& y);
  // The backward pass of the last ForwardTrain, for dy = dL/dy [B, T, D]:
  // writes dx = dL/dx [B, T, D] (overwritten; dx may be dy) and ADDS each
  // weight's gradient to gradients() (ZeroGradients() starts a step). dQ, dK
  // and dV come from the backend's Backward (summed over each KV group);
  // the projections' products from the matmul provider. Uses the weights as
  // they are now, so call it before an optimizer changes them.
  // FailedPrecondition without a ForwardTrain; InvalidArgument when dy or dx
  // does not have its shape.
  absl::Status Backward(const TensorView& dy, const TensorView& dx);
  // dL/dW in AttentionWeights' shapes (allocated, zero, on first use).
  const AttentionWeights& gradients() const { return grads_; }
  absl::Status ZeroGradients();
  // wq, wk, wv, wo (then bq, bk, bv, bo with bias) and their gradients, names
  // prefixed with `prefix`; biases have decay = false.
  absl::StatusOr<std::vector<ParamRef>> Parameters(const std::string& prefix = "");
  // What ran in the last Backward.
  const RunInfo& last_backward_run() const { return last_backward_run_; }

  const AttentionProblem& problem() const { return problem_; }
  // The backend of the last attention call (before any: the one chosen for
  // a decode step). With backend "auto" the choice is made per call from
  // the call's shape class (backends/auto_select.h), so prefill and decode
  // may run on different backends.
  Backend* backend() const { return runner_->backend(); }
  bool is_auto() const { return auto_; }
  // Bytes uploaded to a device backend so far (0 on the host): a cached
  // decode step uploads its queries and the cache's new rows only.
  int64_t uploaded_bytes() const;
  const std::string& selection_reason() const { return selection_reason_; }
  const MatmulProvider& matmul() const { return *matmul_; }
  const AttentionWeights& weights() const { return weights_; }
  bool has_bias() const { return options_.bias; }
  int64_t NumParameters() const;
  // What ran in the last attention call.
  const RunInfo& last_run() const { return last_run_; }

 private:
  MultiHeadAttention() = default;
  // With auto, selects the backend for problem_ (this call's shapes) and
  // makes its runner current; a fixed backend keeps its runner.
  absl::Status ChooseBackend();
  // y = x W^T + b for x [B, T, K]: into contiguous rows y [B*T, N], or into
  // the view *y_view [B, T, N] when given.
  void Linear(const TensorView& x, const Tensor& w, const Tensor& b, float* y,
              const TensorView* y_view = nullptr) const;
  // The projections into the reused workspaces: q [B*Tq, H*d] = x Wq^T + bq
  // from x [B, Tq, D]; k, v [B*Tk, Hkv*d] from kv_source [B, Tk, D].
  struct Projections {
    float* q;
    float* k;
    float* v;
  };
  absl::StatusOr<Projections> Project(const TensorView& x, const TensorView& kv_source);
  // Attention of q [B*Tq, H*d] over the K/V side of `kv` (k, v and, as
  // problem_ asks, kv_lengths, scales, block_table), then y = O Wo^T. They
  // are the cache's views when `cache` is given (a device backend then keeps
  // it mirrored: AttentionRunner::RunWithCache).
  absl::Status AttendAndMerge(float* q, int64_t batch, int64_t q_len, AttentionArgs kv,
                              const TensorView& y, KVCache* cache = nullptr);

  // Allocates grads_ (zero) on first use.
  absl::Status EnsureGradients();

  LayerOptions options_;
  AttentionProblem problem_;  // reused: only the shapes change per call
  const BackendRegistry* registry_ = nullptr;
  bool auto_ = false;
  // One runner per backend used so far (a device backend's runner keeps its
  // buffers and cache mirror); runner_ is the current one.
  std::vector<std::unique_ptr<AttentionRunner>> runners_;
  AttentionRunner* runner_ = nullptr;
  std::string selection_reason_;
  const MatmulProvider* matmul_ = nullptr;
  AttentionWeights weights_;
  FloatWorkspace q_ws_, k_ws_, v_ws_, o_ws_;
  RunInfo last_run_;

  // Training state of the last ForwardTrain (see ForwardTrain).
  AttentionWeights grads_;
  AttentionProblem train_problem_;  // problem_ with return_lse, its shapes
  Backend* train_backend_ = nullptr;
  bool has_train_state_ = false;
  FloatWorkspace tx_ws_, tq_ws_, tk_ws_, tv_ws_, to_ws_, tlse_ws_;
  FloatWorkspace dy_ws_, do_ws_, dq_ws_, dk_ws_, dv_ws_, dx_ws_;  // Backward's scratch
  FloatWorkspace dsinks_ws_;
  RunInfo last_backward_run_;
};

// Checks a [B, T, D] f32 activation view: rank 3, last dim D contiguous, rows
// that do not overlap.
absl::Status CheckActivations(const char* name, const TensorView& x, int64_t model_dim);
// The stride between consecutive rows of its B * T rows; -1 when uneven (then
// the projections run once per sequence).
int64_t RowStride(const TensorView& x);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_MULTI_HEAD_ATTENTION_H_

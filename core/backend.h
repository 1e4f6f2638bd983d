// The attention operator's backend interface. A backend is a plugin: built in
// or loaded from a shared library (include/attnkit/plugin.h), chosen at run time.
#ifndef ATTNKIT_CORE_BACKEND_H_
#define ATTNKIT_CORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

// What a backend's Backward can run, within its forward Capabilities (head
// dims, alignments, layouts and group sizes are the forward's). Paged K/V
// and int8 K/V have no backward: training keeps dense K/V in a float type.
struct BackwardCapabilities {
  bool supported = false;                     // Backward exists at all
  std::vector<DType> dtypes{DType::kF32};     // Q, O, dO and dQ storage
  std::vector<DType> kv_dtypes{DType::kF32};  // K, V, dK and dV storage
  std::vector<MaskKind> masks{MaskKind::kNone};
  bool kv_lengths = false;
  bool blocked_mask = false;
  bool additive_bias = false;  // gradients through a problem with a bias
  bool bias_grad = false;      // and dBias itself (GradArgs::dbias)
  bool softcap = false;
  bool ragged = false;
  bool alibi = false;           // gradients through ALiBi scores (the slopes get none)
  bool sinks = false;           // gradients through sinks, and dsinks (GradArgs::dsinks)
  bool value_head_dim = false;  // Ev != E: dV and dO have V's head dim
  // Two calls with the same inputs and thread count give bitwise equal
  // gradients (dQ partials merged in a fixed order, no atomics).
  bool deterministic = false;
};

// What a backend can run, in machine-readable form. Supports() may refuse
// more (a CUDA backend without a GPU), but never less: the conformance suite
// fails a backend that skips a case its capabilities cover.
struct Capabilities {
  std::vector<DType> dtypes{DType::kF32};     // Q and O storage
  std::vector<DType> kv_dtypes{DType::kF32};  // K and V storage
  std::vector<int64_t> head_dims;             // empty = any in [min, max]
  int64_t min_head_dim = 1;
  int64_t max_head_dim = 1024;
  std::vector<MaskKind> masks{MaskKind::kNone};
  std::vector<Alignment> alignments{Alignment::kTopLeft, Alignment::kBottomRight};
  std::vector<Layout> layouts{Layout::kBHTD};
  int64_t max_group_size = 0;  // largest H / G; 0 = any
  bool lse = false;
  bool kv_lengths = false;
  bool blocked_mask = false;
  bool additive_bias = false;
  bool softcap = false;
  bool paged_kv = false;  // K/V pools read through a block table
  bool ragged = false;    // packed variable-length batches (q_lengths)
  // Two calls on the same inputs with the same thread count give bitwise
  // equal outputs (no atomics or scheduling-dependent reduction order). The
  // conformance suite runs every case twice to hold a backend to this.
  bool deterministic = false;
  BackwardCapabilities backward;
  // The K/V storage types for which the backend, asked for
  // ComputeMode::kFast, computes in the storage type (rounds Q to K's type,
  // P to V's). FAST is a permission: for every other type it runs EXACT.
  std::vector<DType> fast_kv_dtypes;
  bool sinks = false;  // AttentionProblem::sinks (forward)
  bool alibi = false;  // AttentionProblem::alibi (forward; backward.alibi for the backward pass)
  // A head dim of V and O of their own (AttentionProblem::value_head_dim,
  // Ev != E). Ev must also lie in the head dims above.
  bool value_head_dim = false;

  // One line per property, for `attnkit backends`.
  std::string Describe() const;
};

// OK when `caps` covers `p`; otherwise Unimplemented naming the property,
// the value asked for and what is supported.
absl::Status CheckCapabilities(const Capabilities& caps, const AttentionProblem& p);

// The tensors of one call. Shapes are logical; strides give the memory order.
//   q, o: [B, H, Tq, d] in problem.dtype; k, v: [B, G, Tk, d] in problem.kv_dtype
//   lse: f32 [B, H, Tq], only when problem.return_lse
//   kv_lengths: i32 [B], only when problem.has_kv_lengths() (values match it)
//   blocked_mask: u8 [B, H, Tq, Tk], 1 = blocked; stride 0 broadcasts B or H
//   bias: f32 [B, H, Tq, Tk], added to the scores; stride 0 broadcasts
//   k_scale, v_scale: f32, K's shape without d ([B, G, Tk]), only when
//     problem.kv_dtype is i8: key t of head g is k[.., t, g, :] * k_scale[..]
//   sinks: f32 [H], only when problem.sinks: query head h's sink logit
//     (config.proto sinks gives the rule; core/sinks.h folds it into a row)
//   alibi_slopes: f32 [H], only when problem.alibi: query head h's ALiBi
//     slope (config.proto alibi; core/alibi.h gives the term)
// Paged K/V (problem.is_paged()): k, v (and the scales) are pools
//   [num_pages, page_size, G, d] ([num_pages, page_size, G]); block_table is
//   i32 [B, max_pages]: sequence b's key t is row t % page_size of page
//   block_table[b, t / page_size]. Entries past a sequence's last page are
//   never read.
// Ragged batches (problem.is_ragged()): q, o are packed [total_q, H, d], lse
//   [H, total_q]; cu_seqlens_q i32 [B + 1] holds the offsets (0, then the
//   running sum of q_lengths); unless paged, k, v are packed [total_k, G, d]
//   (scales [total_k, G]) at offsets cu_seqlens_k i32 [B + 1]; kv_lengths
//   holds each sequence's key count.
// All data lives in memory the backend allocated (or host memory for CPU
// backends).
struct AttentionArgs {
  TensorView q, k, v, o;
  TensorView lse;
  TensorView kv_lengths;
  TensorView blocked_mask;
  TensorView bias;
  TensorView k_scale, v_scale;
  TensorView block_table;
  TensorView cu_seqlens_q, cu_seqlens_k;
  TensorView sinks;
  TensorView alibi_slopes;
};

// Checks that `args` matches `p`: shapes, dtypes, present/absent optional
// inputs, and that output views do not overlap inputs.
absl::Status ValidateArgs(const AttentionProblem& p, const AttentionArgs& args);

// OK when caps.backward covers the backward pass of `p` (and CheckCapabilities
// its forward); otherwise Unimplemented naming the property.
absl::Status CheckBackwardCapabilities(const Capabilities& caps, const AttentionProblem& p);

// The tensors a backward call adds to the forward's AttentionArgs. The
// forward's q, k, v, o and lse are inputs (the problem must have return_lse:
// the backward pass recomputes P = exp(S - lse) tile by tile).
//   d_o: dL/dO, o's shape and dtype
//   dq: dL/dQ, q's shape and dtype; dk, dv: k's shape and kv_dtype, each the
//     sum over the query heads of its group (GQA, MQA)
//   dbias: optional f32 [B, H, Tq, Tk], dL/dbias for a problem with
//     additive_bias, written for every pair (0 where blocked); no stride-0
//     broadcast (sum it yourself over the dims the bias broadcasts)
//   dsinks: optional f32 [H], dL/dsinks for a problem with sinks:
//     -sum over b, i of exp(sink_h - lse_bhi) dO_bhi . O_bhi (core/sinks_grad.h)
// A row with no visible key contributes nothing: its dq row is 0. Gradients
// are accumulated in f32 and stored in their tensors' dtypes. Outputs may not
// overlap inputs or each other.
struct GradArgs {
  TensorView d_o;
  TensorView dq, dk, dv;
  TensorView dbias;
  TensorView dsinks;
};

// ValidateArgs(p, args) plus the rules above for `grads`.
absl::Status ValidateGradArgs(const AttentionProblem& p, const AttentionArgs& args,
                              const GradArgs& grads);
// For host tensors, after ValidateArgs: kv_lengths and cu_seqlens hold the
// problem's lengths, and every block table entry a sequence uses is a page
// of the pool. Forward runs it for host-memory backends.
absl::Status ValidateHostIndexTensors(const AttentionProblem& p, const AttentionArgs& args);

// What actually ran, for provenance in every report.
struct RunInfo {
  std::string backend;
  std::string kernel;  // e.g. "flash-tiled/AVX3 q4xk16"
  // Device allocations the backend has made for its own scratch since it was
  // created (grow-only workspaces): steady-state calls add none. -1 when the
  // backend does not report it.
  int64_t workspace_allocations = -1;
};

// Memory owned by a backend (device memory for accelerators).
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string Name() const = 0;
  virtual std::string Description() const = 0;
  virtual Capabilities Caps() const = 0;
  // OK when the backend can run at all here; otherwise the reason (e.g.
  // "CUDA driver version is insufficient for CUDA runtime version").
  virtual absl::Status Available() const { return absl::OkStatus(); }
  // OK, or Unimplemented / FailedPrecondition with a reason a person can act
  // on. The default is Available() plus CheckCapabilities(Caps(), p).
  virtual absl::Status Supports(const AttentionProblem& p) const;
  // The same for the backward pass: the default is Available() plus
  // CheckBackwardCapabilities(Caps(), p).
  virtual absl::Status SupportsBackward(const AttentionProblem& p) const;

  // Memory. The defaults use aligned host memory; accelerator backends
  // override all five.
  virtual bool UsesHostMemory() const { return true; }
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes);
  virtual absl::Status Upload(const void* host, DeviceBuffer* dst, size_t bytes);
  // Copies `bytes` from host into dst at byte `dst_offset` (a KV cache's new
  // rows into its device mirror); InvalidArgument past the buffer's end.
  virtual absl::Status UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                                size_t bytes);
  // The check every UploadAt makes first: InvalidArgument, with the sizes,
  // when [dst_offset, dst_offset + bytes) is not inside dst.
  static absl::Status CheckUploadRange(const DeviceBuffer& dst, size_t dst_offset, size_t bytes);
  virtual absl::Status Download(const DeviceBuffer& src, void* host, size_t bytes);
  // Waits until the work queued by Forward is finished (no-op on the CPU).
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // Device backends: run Forward, copies and Synchronize on `stream`, the
  // native handle of the caller's stream (a cudaStream_t, e.g. PyTorch's
  // torch.cuda.current_stream().cuda_stream), so that the caller's own work
  // on that stream orders with ours; nullptr is CUDA's legacy default
  // stream. Until set, a device backend runs on a stream of its own. Host
  // backends return Unimplemented: they have no stream.
  virtual absl::Status SetStream(void* stream);

  // Worker threads Forward may use (n >= 1). Single-threaded backends keep
  // the default, which ignores the request and reports 1.
  virtual absl::Status SetNumThreads(int n) {
    (void)n;
    return absl::OkStatus();
  }
  virtual int NumThreads() const { return 1; }

  // Validates args against p, checks Supports(p), then runs ForwardImpl.
  absl::Status Forward(const AttentionProblem& p, const AttentionArgs& args,
                       RunInfo* info = nullptr);
  // ForwardImpl alone, for a caller that has just made Forward's checks on
  // the same problem and tensors: the plugin boundary, whose host checks
  // before it calls the plugin (plugin/backend_export.cc), so a call through
  // the C table validates once, not twice.
  absl::Status ForwardChecked(const AttentionProblem& p, const AttentionArgs& args, RunInfo* info);

  // Validates args and grads against p (ValidateGradArgs), checks
  // SupportsBackward(p), then runs BackwardImpl: dQ, dK, dV (and dBias).
  absl::Status Backward(const AttentionProblem& p, const AttentionArgs& args, const GradArgs& grads,
                        RunInfo* info = nullptr);
  // BackwardImpl alone, after Backward's checks (the plugin boundary).
  absl::Status BackwardChecked(const AttentionProblem& p, const AttentionArgs& args,
                               const GradArgs& grads, RunInfo* info);

 protected:
  // Computes o (and lse) for a validated, supported problem.
  virtual absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                   RunInfo* info) = 0;
  // Computes the gradients of a validated problem SupportsBackward accepts.
  // The default is Unimplemented (a backend without caps.backward).
  virtual absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                    const GradArgs& grads, RunInfo* info);
};

}  // namespace attnkit

#endif  // ATTNKIT_CORE_BACKEND_H_

#include "backends/cuda/cublas_backend.h"

#include <cublas_v2.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cublas_kernels.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/params.h"
#include "core/status_macros.h"

namespace attnkit {
namespace cuda {
namespace {

// Scores + probabilities + accumulators of one query block, at most.
constexpr int64_t kBlockBudgetBytes = int64_t{256} << 20;

absl::Status CublasStatus(cublasStatus_t s, absl::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrFormat("%s: %s", what, cublasGetStatusString(s));
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (s == CUBLAS_STATUS_NOT_INITIALIZED || s == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

size_t ElemBytes(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

cudaDataType CudaTypeOf(ElemType t) {
  switch (t) {
    case ElemType::kF16:
      return CUDA_R_16F;
    case ElemType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

// One GEMM operand of batch b: [heads, T, d] with strides, in `type`.
struct Operand {
  const char* base = nullptr;  // element [b, 0, 0, 0]
  Strides4 s;
  ElemType type = ElemType::kF32;
  const char* at(int64_t h, int64_t t) const {
    return base + (h * s.h + t * s.t) * static_cast<int64_t>(ElemBytes(type));
  }
};

// GEMM-ready as stored: compute type, unit column stride, row stride >= d
// and within cuBLAS's int leading dimensions.
bool Direct(const Strides4& s, ElemType t, ElemType compute, int64_t d) {
  return t == compute && s.c == 1 && s.t >= d && s.t <= std::numeric_limits<int>::max();
}

// The compute type of a GEMM over operands of type t, fp32 accumulation
// both ways. f32 operands: _PEDANTIC, IEEE fp32 arithmetic whatever the
// environment asks (NVIDIA_TF32_OVERRIDE, CUBLAS_EMULATE_SINGLE_PRECISION):
// never TF32 or BF16x9 emulation, which would round the operands. 16-bit
// operands: the tensor cores, whose products of two 16-bit values are exact.
cublasComputeType_t ComputeTypeFor(ElemType t) {
  return t == ElemType::kF32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
}

class CublasBackend : public CudaBackendBase {
 public:
  explicit CublasBackend(std::string name) : name_(std::move(name)) {}
  ~CublasBackend() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return "CUDA baseline: batched cuBLAS GEMMs (S = QK^T, O = PV, fp32 accumulation, no TF32) "
           "with a masked-softmax kernel between them, blocked over query rows; compute EXACT "
           "keeps P in f32 (an f32 GEMM with V widened exactly), FAST stores P in V's 16-bit "
           "type (Q rounded to K's)";
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    c.layouts = {Layout::kBHTD, Layout::kBTHD};
    c.lse = c.kv_lengths = c.blocked_mask = c.additive_bias = c.softcap = true;
    // FAST (params.h CublasTypesFor): 16-bit K/V stores P in V's type for a
    // 16-bit P.V GEMM, and Q in K's type for Q.K.
    c.fast_kv_dtypes = {DType::kF16, DType::kBF16};
    // cuBLAS GEMMs on one stream are bitwise reproducible on one GPU model and
    // toolkit (cuBLAS docs, "Results reproducibility"); the softmax kernel
    // reduces each row in a fixed order.
    c.deterministic = true;
    return c;
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override {
    ATTNKIT_ASSIGN_OR_RETURN(const FlashParams f, MakeFlashParams(p, args));
    absl::MutexLock lock(&call_mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, ScratchStream());
    if (handle_ == nullptr) {
      ATTNKIT_RETURN_IF_ERROR(CublasStatus(cublasCreate(&handle_), "cublasCreate"));
      // No TF32 for f32 GEMMs, and every reduction in the fp32 accumulator.
      ATTNKIT_RETURN_IF_ERROR(CublasStatus(
          cublasSetMathMode(
              handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode"));
    }
    // Every call: the caller may have set another stream since the last one.
    ATTNKIT_RETURN_IF_ERROR(CublasStatus(cublasSetStream(handle_, stream), "cublasSetStream"));
    // Q and K in ct for S = Q K^T; P and V in pt for O = P V: f32 under
    // EXACT (V widened exactly), V's 16-bit type under FAST (CublasTypesFor).
    const CublasTypes types = CublasTypesFor(f);
    const ElemType ct = types.qk, pt = types.pv;
    const int64_t B = f.batch, H = f.num_heads, G = f.num_kv_heads, group = f.group_size;
    const int64_t Tq = f.q_len, Tk = f.kv_len, d = f.head_dim;
    const size_t esize = ElemBytes(ct), psize = ElemBytes(pt);
    const bool q_direct = Direct(f.q_stride, f.q_type, ct, d);
    const bool k_direct = Direct(f.k_stride, f.kv_type, ct, d);
    // V as stored needs non-negative strides too: a guarded copy of it keeps
    // its element offsets (LaunchGuardedOperand).
    const bool v_direct = Direct(f.v_stride, f.kv_type, pt, d) && f.v_stride.h >= 0;
    const int64_t nq_max =
        CublasQueryBlock(Tq, CublasBytesPerQueryRow(G, Tk, d, psize), kBlockBudgetBytes);
    const int64_t nq_tail = Tq % nq_max;

    // V rows that hold a NaN or Inf (below each sequence's length): flagged
    // for the softmax (the rows that see one become NaN) and zeroed in a copy
    // of V, since 0 * NaN inside the P.V GEMM would reach the rows that do
    // not see them. Which V the GEMM reads is decided on the device from the
    // flag counts, so the host never waits in the middle of a call (graph
    // capture, and the caller's stream, stay intact): a converted V is
    // always a copy (flagged rows zeroed as it is made); a V read as stored
    // gets a copy at the same offsets only for batch entries with flagged
    // rows, and reaches the P.V GEMM through a device pointer array.
    const size_t flag_bytes = Align256(B * G * Tk);
    ATTNKIT_ASSIGN_OR_RETURN(void* scan_ptr, scan_.Get(flag_bytes + Align256(B * sizeof(int))));
    uint8_t* v_bad = static_cast<uint8_t*>(scan_ptr);
    int* bad_counts = reinterpret_cast<int*>(v_bad + flag_bytes);
    ATTNKIT_RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(bad_counts, 0, B * sizeof(int), stream), "V scan"));
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(
        LaunchFlagNonFiniteRows(f.v, f.kv_type, f.v_stride, static_cast<int>(B),
                                static_cast<int>(G), static_cast<int>(Tk), static_cast<int>(d),
                                f.kv_lengths, f.kv_lengths_stride, v_bad, bad_counts, stream),
        "V scan"));

    // Workspace: converted operands of one batch entry, then the block
    // buffers, then (V read as stored) the guarded copy and the pointer
    // arrays of the P.V GEMM: V's, then P's and acc's for full and last blocks.
    const size_t v_span = static_cast<size_t>((G - 1) * f.v_stride.h +
                                              (std::max<int64_t>(Tk, 1) - 1) * f.v_stride.t + d);
    const size_t q_bytes = q_direct ? 0 : Align256(H * Tq * d * esize);
    const size_t k_bytes = k_direct ? 0 : Align256(G * Tk * d * esize);
    const size_t v_bytes = Align256((v_direct ? v_span : G * Tk * d) * psize);
    const size_t s_bytes = Align256(G * nq_max * Tk * sizeof(float));
    const size_t p_bytes = Align256(G * nq_max * Tk * psize);
    const size_t acc_bytes = Align256(G * nq_max * d * sizeof(float));
    const size_t ptr_bytes = v_direct ? Align256(G * sizeof(void*)) : 0;
    ATTNKIT_ASSIGN_OR_RETURN(void* ws_ptr, workspace_.Get(q_bytes + k_bytes + v_bytes + s_bytes +
                                                          p_bytes + acc_bytes + 5 * ptr_bytes));
    char* ws = static_cast<char*>(ws_ptr);
    char* conv_q = ws;
    char* conv_k = conv_q + q_bytes;
    char* conv_v = conv_k + k_bytes;
    float* scores = reinterpret_cast<float*>(conv_v + v_bytes);
    char* probs = reinterpret_cast<char*>(scores) + s_bytes;
    float* acc = reinterpret_cast<float*>(probs + p_bytes);
    char* ptr_base = reinterpret_cast<char*>(acc) + acc_bytes;
    const void** v_ptrs = reinterpret_cast<const void**>(ptr_base);
    // P's and acc's, [0] of a full block of nq_max rows, [1] of the last.
    void** more_ptrs = reinterpret_cast<void**>(ptr_base + ptr_bytes);
    const size_t n_ptrs = ptr_bytes / sizeof(void*);
    void** p_ptrs[2] = {more_ptrs, more_ptrs + 2 * n_ptrs};
    void** acc_ptrs[2] = {more_ptrs + n_ptrs, more_ptrs + 3 * n_ptrs};
    if (v_direct) {
      const int64_t rows[2] = {nq_max, nq_tail > 0 ? nq_tail : nq_max};
      for (int r = 0; r < 2; ++r) {
        ATTNKIT_RETURN_IF_ERROR(
            CudaStatus(LaunchStridedPointers(probs, rows[r] * Tk * static_cast<int64_t>(psize),
                                             static_cast<int>(G), p_ptrs[r], stream),
                       "P.V pointers"));
        ATTNKIT_RETURN_IF_ERROR(
            CudaStatus(LaunchStridedPointers(acc, rows[r] * d * static_cast<int64_t>(sizeof(float)),
                                             static_cast<int>(G), acc_ptrs[r], stream),
                       "P.V pointers"));
      }
    }

    const Strides4 packed_q{0, Tq * d, d, 1}, packed_kv{0, Tk * d, d, 1};
    const cudaDataType cuda_ct = CudaTypeOf(ct), cuda_pt = CudaTypeOf(pt);
    const float one = 1.0f, zero = 0.0f;
    for (int64_t b = 0; b < B; ++b) {
      // Operands of batch b, converted to contiguous copies of type `to` when
      // their type or strides do not suit cuBLAS (FAST: Q rounded to K's
      // 16-bit type here, to nearest even; EXACT: conversions are exact).
      auto operand = [&](const void* data, const Strides4& s, ElemType type, bool direct,
                         char* conv, ElemType to, int64_t heads, int64_t tokens,
                         const Strides4& packed) -> absl::StatusOr<Operand> {
        const char* batch = static_cast<const char*>(data) + b * s.b * int64_t(ElemBytes(type));
        if (direct) return Operand{batch, s, type};
        ATTNKIT_RETURN_IF_ERROR(CudaStatus(
            LaunchConvert(batch, type, s, static_cast<int>(heads), static_cast<int>(tokens),
                          static_cast<int>(d), conv, to, stream),
            "operand conversion"));
        return Operand{conv, packed, to};
      };
      ATTNKIT_ASSIGN_OR_RETURN(const Operand q, operand(f.q, f.q_stride, f.q_type, q_direct, conv_q,
                                                        ct, H, Tq, packed_q));
      ATTNKIT_ASSIGN_OR_RETURN(const Operand k, operand(f.k, f.k_stride, f.kv_type, k_direct,
                                                        conv_k, ct, G, Tk, packed_kv));
      const uint8_t* v_bad_b = v_bad + b * G * Tk;
      const char* v_batch =
          static_cast<const char*>(f.v) + b * f.v_stride.b * int64_t(ElemBytes(f.kv_type));
      Operand v;
      if (v_direct) {  // V as stored, or its guarded copy: chosen on the device
        ATTNKIT_RETURN_IF_ERROR(
            CudaStatus(LaunchGuardedOperand(v_batch, f.kv_type, f.v_stride, static_cast<int>(G),
                                            static_cast<int>(Tk), static_cast<int>(d), v_bad_b,
                                            bad_counts + b, conv_v, v_ptrs, stream),
                       "V guard"));
        v = Operand{v_batch, f.v_stride, pt};
      } else {  // a converted copy with the flagged rows zeroed
        ATTNKIT_RETURN_IF_ERROR(CudaStatus(
            LaunchConvert(v_batch, f.kv_type, f.v_stride, static_cast<int>(G), static_cast<int>(Tk),
                          static_cast<int>(d), conv_v, pt, stream, v_bad_b),
            "operand conversion"));
        v = Operand{conv_v, packed_kv, pt};
      }
      // The GEMMs stop at this sequence's length: keys past it are never read.
      const int64_t keys = p.KvLength(b);
      for (int64_t j = 0; j < group; ++j) {
        for (int64_t i0 = 0; i0 < Tq; i0 += nq_max) {
          const int64_t nq = std::min(nq_max, Tq - i0);
          // S[g] (nq x Tk, row-major) = Q[b, g*group + j, i0:i0+nq] K[b, g]^T; in
          // cuBLAS's column-major terms S^T (Tk x nq) = K (Tk x d) Q^T (d x nq).
          if (keys > 0) {
            ATTNKIT_RETURN_IF_ERROR(CublasStatus(
                cublasGemmStridedBatchedEx(
                    handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(keys), static_cast<int>(nq),
                    static_cast<int>(d), &one, k.at(0, 0), cuda_ct, static_cast<int>(k.s.t), k.s.h,
                    q.at(j, i0), cuda_ct, static_cast<int>(q.s.t), group * q.s.h, &zero, scores,
                    CUDA_R_32F, static_cast<int>(Tk), nq * Tk, static_cast<int>(G),
                    ComputeTypeFor(ct), CUBLAS_GEMM_DEFAULT),
                "cuBLAS S = QK^T"));
          }
          SoftmaxParams sp;
          sp.scores = scores;
          sp.probs = probs;
          sp.probs_type = pt;  // f32 (EXACT) or V's 16-bit type (FAST)
          sp.num_kv_heads = static_cast<int>(G);
          sp.nq = static_cast<int>(nq);
          sp.kv_len = static_cast<int>(Tk);
          sp.group_size = static_cast<int>(group);
          sp.b = static_cast<int>(b);
          sp.j = static_cast<int>(j);
          sp.i0 = static_cast<int>(i0);
          sp.scale = f.scale;
          sp.softcap = f.softcap;
          sp.mask = f.mask;
          sp.kv_lengths = f.kv_lengths;
          sp.kv_lengths_stride = f.kv_lengths_stride;
          sp.blocked_mask = f.blocked_mask;
          sp.mask_stride = f.mask_stride;
          sp.bias = f.bias;
          sp.bias_stride = f.bias_stride;
          sp.lse = f.lse;
          sp.lse_stride_b = f.lse_stride_b;
          sp.lse_stride_h = f.lse_stride_h;
          sp.lse_stride_t = f.lse_stride_t;
          sp.v_bad = v_bad_b;
          ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchMaskedSoftmax(sp, stream), "masked softmax"));
          // acc[g] (nq x d, row-major) = P[g] (nq x keys) V[b, g] (keys x d); column-major
          // acc^T (d x nq) = V^T (d x keys) P^T (keys x nq). No keys: zeros.
          if (keys > 0 && v_direct) {  // V's pointers from LaunchGuardedOperand
            const int r = nq == nq_max ? 0 : 1;
            ATTNKIT_RETURN_IF_ERROR(CublasStatus(
                cublasGemmBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d),
                                    static_cast<int>(nq), static_cast<int>(keys), &one, v_ptrs,
                                    cuda_pt, static_cast<int>(v.s.t), p_ptrs[r], cuda_pt,
                                    static_cast<int>(Tk), &zero, acc_ptrs[r], CUDA_R_32F,
                                    static_cast<int>(d), static_cast<int>(G), ComputeTypeFor(pt),
                                    CUBLAS_GEMM_DEFAULT),
                "cuBLAS O = PV"));
          } else if (keys > 0) {
            ATTNKIT_RETURN_IF_ERROR(CublasStatus(
                cublasGemmStridedBatchedEx(
                    handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d), static_cast<int>(nq),
                    static_cast<int>(keys), &one, v.at(0, 0), cuda_pt, static_cast<int>(v.s.t),
                    v.s.h, probs, cuda_pt, static_cast<int>(Tk), nq * Tk, &zero, acc, CUDA_R_32F,
                    static_cast<int>(d), nq * d, static_cast<int>(G), ComputeTypeFor(pt),
                    CUBLAS_GEMM_DEFAULT),
                "cuBLAS O = PV"));
          } else {
            ATTNKIT_RETURN_IF_ERROR(CudaStatus(
                cudaMemsetAsync(acc, 0, G * nq * d * sizeof(float), stream), "output zeroing"));
          }
          ATTNKIT_RETURN_IF_ERROR(CudaStatus(
              LaunchStoreOutput(acc, static_cast<int>(G), static_cast<int>(nq), static_cast<int>(d),
                                f.o, f.q_type, f.o_stride, static_cast<int>(b), static_cast<int>(j),
                                static_cast<int>(i0), static_cast<int>(group), stream),
              "output store"));
        }
      }
    }
    if (info != nullptr) {
      // "cublas-gemm bf16 p=f32 qblock=512": Q.K's operand type, then what
      // the compute mode rounded (ComputeTag: P's type for P.V, and Q's
      // rounding to K's type under FAST).
      info->kernel =
          absl::StrFormat("cublas-gemm %s %s qblock=%d%s", ElemTypeName(ct), ComputeTag(f), nq_max,
                          (q_direct && k_direct && v_direct) ? "" : " converted");
      info->workspace_allocations = workspace_.allocations() + scan_.allocations();
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  cublasHandle_t handle_ ABSL_GUARDED_BY(call_mu_) = nullptr;
  Workspace workspace_ ABSL_GUARDED_BY(call_mu_);
  Workspace scan_ ABSL_GUARDED_BY(call_mu_);  // V's NaN/Inf row flags and counts
};

}  // namespace

std::unique_ptr<Backend> MakeCublasBackend(const std::string& name) {
  return std::make_unique<CublasBackend>(name);
}

}  // namespace cuda
}  // namespace attnkit

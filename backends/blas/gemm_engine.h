// The GEMM library under the block-GEMM backends (blas_backend.h): OpenBLAS
// for "blas" (openblas_engine.h), oneDNN's matmul for "onednn"
// (backends/onednn/). The blocking, the softmax rows, the NaN rule and the
// backward pass's five products are written once (attention_block.cc,
// backward.cc) and call the library only through this interface.
#ifndef ATTNKIT_BACKENDS_BLAS_GEMM_ENGINE_H_
#define ATTNKIT_BACKENDS_BLAS_GEMM_ENGINE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace attnkit {
namespace blas {

class GemmEngine {
 public:
  virtual ~GemmEngine() = default;

  // The backend's registered name: "blas", "onednn".
  virtual std::string BackendName() const = 0;
  // The library and the kernel family it runs on this CPU, for
  // Backend::Description, e.g. "OpenBLAS 0.3.21 (Zen)", "oneDNN 2.6.3 (avx2)".
  virtual std::string Library() const = 0;
  // A short tag for RunInfo::kernel, e.g. "sgemm/Zen", "onednn/avx2".
  virtual std::string KernelTag() const = 0;
  // What the library cannot do here and why, for Backend::Description; ""
  // when nothing.
  virtual std::string Remarks() const { return {}; }

  // Threads each following GEMM may use when called from a thread that is
  // not running other GEMMs at the same time: 1 while the backend spreads
  // blocks over its own threads, its thread count when the library's own
  // threads split each GEMM. Called on the backend's calling thread, between
  // calls; the value applies to GEMMs made from any thread afterwards.
  virtual void SetGemmThreads(int n) = 0;
  virtual int GemmThreads() const = 0;

  // Row-major f32 GEMM on the calling thread (and the library's threads):
  //   c [m, n] = alpha * op(a) . op(b) + beta * c,
  // op(a) [m, k] is a (trans_a false, a row-major [m, k] with row stride
  // lda) or a^T (a [k, m]); op(b) [k, n] likewise. beta 0 ignores c's values
  // (NaN included). Safe to call from several threads at once.
  virtual void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) = 0;

  // Whether Int8DotTransB exists (an integer GEMM with exact int32 sums).
  virtual bool HasInt8Dot() const { return false; }
  // c [m, n] (int32, row stride ldc) = a [m, k] . b [n, k]^T, exactly:
  // int8 values, int32 sums (|sum| <= 127^2 k, exact for k < 2^17). Only
  // when HasInt8Dot(). Safe to call from several threads at once.
  virtual void Int8DotTransB(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                             const int8_t* b, int64_t ldb, int32_t* c, int64_t ldc) {}

  // Whether U8S8DotBatch exists (an integer GEMM of u8 by s8 values with
  // exact int32 sums).
  virtual bool HasU8S8Dot() const { return false; }
  // For each x in [0, batch): c_x [m, n] = a_x [m, k] . b_x [k, n], exactly
  // (|sum| <= 255 * 128 * k: exact for k < 2^16). a is u8 [batch, m, k] and
  // c int32 [batch, m, n], both dense; b_x = b + x * stride_b is s8 [k, n]
  // with row stride ldb. FAST's P.V over int8 V (attention_block.cc): each
  // batch entry is one block of keys, its quantized weights against V's
  // rows as stored. Only when HasU8S8Dot(). Safe to call from several
  // threads at once.
  virtual void U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                            const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) {}

  // Whether Gemm16 takes operands of `type` (kBF16 or kF16), multiplying
  // their exact products and summing in f32.
  virtual bool HasGemm16(DType type) const { return false; }
  // Row-major GEMM on 16-bit operands of `type` (raw bits), f32 result:
  //   c [m, n] = alpha * op(a) . op(b) + beta * c,
  // op(a) = a [m, k] (trans_a false) or a^T (a [k, m]), op(b) = b [k, n]
  // (trans_b false) or b^T (b [n, k]). Every product of
  // two 16-bit values is exact in f32; the sums are f32. The bf16 dot
  // instructions (vdpbf16ps) may flush subnormal inputs and products to 0
  // (core/fast_compute.h MayFlushBF16Products). Only when HasGemm16(type).
  virtual void Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {}

  // Stacked query rows per forward block at which this engine's 16-bit
  // GEMMs run best (the plan's default where Q.K is one and
  // BlasOptions::target_rows is 0; block_plan.h); 0: no preference. The
  // block's S [rows, keys] f32 is Q.K's output, and under FAST its P in 16
  // bits is P.V's input.
  virtual int64_t PreferredRows16() const { return 0; }

  // The first error a GEMM met since the last call (a primitive the library
  // could not create, say), cleared by the call; the backend returns it
  // after its blocks have run. OpenBLAS's cblas_sgemm cannot fail.
  virtual absl::Status TakeError() { return absl::OkStatus(); }
};

// Sets the engine's GEMM thread count for a scope and restores it after.
class ScopedGemmThreads {
 public:
  ScopedGemmThreads(GemmEngine* engine, int n) : engine_(engine), saved_(engine->GemmThreads()) {
    if (n != saved_) engine_->SetGemmThreads(n);
  }
  ~ScopedGemmThreads() {
    if (engine_->GemmThreads() != saved_) engine_->SetGemmThreads(saved_);
  }
  ScopedGemmThreads(const ScopedGemmThreads&) = delete;
  ScopedGemmThreads& operator=(const ScopedGemmThreads&) = delete;

 private:
  GemmEngine* engine_;
  int saved_;
};

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_GEMM_ENGINE_H_

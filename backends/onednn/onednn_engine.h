// The "onednn" backend's GEMM library: oneDNN's matmul primitive (Debian 12:
// libdnnl 2.6, the CPU primitives library under PyTorch and ONNX Runtime),
// behind blas::GemmEngine so that the block-GEMM backend (blas_backend.h)
// runs on it unchanged.
//
// Primitives are created once per shape and kept (a primitive descriptor and
// its JIT kernel cost 15-200 us to create here, more than a small block's
// product): a bounded, thread-safe cache keyed by the GEMM's shape, leading
// dimensions, transpositions, types, alpha and beta. Each GEMM in flight
// takes a stream and a scratchpad (scratchpad_mode::user) from the engine's
// free list, so blocks on several threads execute primitives at the same
// time and scratchpads are allocated once.
//
// Threads: the Debian build uses OpenMP. Each GEMM first sets its calling
// thread's OpenMP thread count (an ICV of that thread) to SetGemmThreads's
// value: 1 while the backend spreads blocks over its threads.
#ifndef ATTNKIT_BACKENDS_ONEDNN_ONEDNN_ENGINE_H_
#define ATTNKIT_BACKENDS_ONEDNN_ONEDNN_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/blas/gemm_engine.h"

namespace attnkit {
namespace onednn {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;         // primitives created
  double create_seconds = 0;  // spent creating them
  int64_t evictions = 0;
  int64_t entries = 0;  // held now
};

struct EngineOptions {
  size_t max_cached_primitives = 1024;  // least recently used go first
};

class OneDnnEngine : public blas::GemmEngine {
 public:
  // Fails (Unavailable, with oneDNN's message) when oneDNN cannot create an
  // f32 matmul on this CPU. Probes once whether the int8 GEMMs are exact
  // here (HasInt8Dot: s8 x s8; HasU8S8Dot: u8 x s8, batched) and whether it
  // has a bf16 matmul (HasGemm16; f16 is not used). Without VNNI, oneDNN's
  // x86 int8 kernels sum pairs of products in saturating 16-bit lanes
  // (vpmaddubsw), so 127 * 127 * 128 comes out as 16320 on AVX2; such an
  // engine has no int8 dot.
  static absl::StatusOr<std::unique_ptr<OneDnnEngine>> Create(const EngineOptions& options = {});
  ~OneDnnEngine() override;

  std::string BackendName() const override { return "onednn"; }
  std::string Library() const override;
  std::string KernelTag() const override;
  std::string Remarks() const override;
  void SetGemmThreads(int n) override;
  int GemmThreads() const override;
  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) override;
  bool HasInt8Dot() const override;
  void Int8DotTransB(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                     int64_t ldb, int32_t* c, int64_t ldc) override;
  // Probed once like HasInt8Dot: exact only with VNNI here.
  bool HasU8S8Dot() const override;
  void U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                    const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) override;
  bool HasGemm16(DType type) const override;
  void Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc) override;
  absl::Status TakeError() override;
  // kAmxRows16 where oneDNN multiplies bf16 on AMX, else no preference.
  // The FAST bf16 prefills ran fastest with blocks of 64 stacked rows
  // there (Xeon with AMX, 2 threads, `onednn_bench 2 3 sweep`, all keys
  // per S block: B1 H16 T2048 d64 causal 23.2 ms at 64 rows against 31.0
  // at 256, 28.7 at 128 and 30.7 at 32 (its rows list extended for that
  // run); GQA H32/8 T1024 d128 18.8 against 23.9, 23.5 and 28.0), where
  // Zen 5's AVX512_BF16 GEMMs ran best at the default 256. All-bf16 EXACT
  // (f32 P.V) measured 64 and 256 within noise (59.2 and 62.8 ms; 55.4
  // and 53.4), and takes 64 too.
  int64_t PreferredRows16() const override;
  static constexpr int64_t kAmxRows16 = 64;

  // The ISA oneDNN dispatches to here, as oneDNN names it (e.g. "avx2",
  // "avx512_core_bf16", "avx512_core_amx").
  std::string Isa() const;
  // Why HasInt8Dot is false, or "" when it is true.
  std::string Int8Note() const;
  // Why HasU8S8Dot is false, or "" when it is true.
  std::string U8Note() const;
  // Why HasGemm16(kBF16) is false (oneDNN 2.6 multiplies bf16 on
  // avx512_core and above), or "".
  std::string Bf16Note() const;
  // oneDNN's version, e.g. "2.6.3".
  static std::string Version();
  CacheStats Stats() const;

 private:
  struct State;
  explicit OneDnnEngine(std::unique_ptr<State> state);
  // Whether the bf16 matmul exists and sums small integers exactly.
  void ProbeBf16();
  std::unique_ptr<State> state_;
};

}  // namespace onednn
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_ONEDNN_ONEDNN_ENGINE_H_

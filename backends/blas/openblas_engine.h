// The "blas" backend's GEMM library: OpenBLAS's cblas_sgemm. OpenBLAS has no
// integer GEMM (0.3.21, Debian 12), so int8 K/V are dequantized to f32.
#ifndef ATTNKIT_BACKENDS_BLAS_OPENBLAS_ENGINE_H_
#define ATTNKIT_BACKENDS_BLAS_OPENBLAS_ENGINE_H_

#include <memory>

#include "backends/blas/gemm_engine.h"

namespace attnkit {
namespace blas {

// GemmThreads is OpenBLAS's thread count, which is process-wide.
std::shared_ptr<GemmEngine> MakeOpenBlasEngine();

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_OPENBLAS_ENGINE_H_

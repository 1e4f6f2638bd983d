// A GemmEngine of plain loops with every product the block-GEMM backend can
// ask for: f32, exact int8 and u8 x s8 dots and 16-bit (bf16, f16) GEMMs.
// Slow, and not for use: the tests run the blas backend on it
// ("blas-scalar") so that its int8 and 16-bit product paths
// (attention_block.cc), which the real libraries take only on some CPUs
// (oneDNN: int8 with VNNI, bf16 with AVX512_BF16), are checked by every
// suite on every CPU.
#ifndef ATTNKIT_BACKENDS_BLAS_SCALAR_ENGINE_H_
#define ATTNKIT_BACKENDS_BLAS_SCALAR_ENGINE_H_

#include <memory>

#include "backends/blas/gemm_engine.h"

namespace attnkit {
namespace blas {

std::shared_ptr<GemmEngine> MakeScalarEngine();

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_SCALAR_ENGINE_H_

// "cuda-cublas": attention as two batched cuBLAS GEMMs with a masked-softmax
// kernel between them, over blocks of query rows so the score matrix stays
// within a fixed budget. The simple, trusted CUDA baseline.
#ifndef ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_
#define ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace attnkit {
namespace cuda {

std::unique_ptr<Backend> MakeCublasBackend(const std::string& name = "cuda-cublas");

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_

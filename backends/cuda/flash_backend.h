// "cuda": flash-attention forward kernels (tensor cores for f16/bf16, CUDA
// cores for f32), with split-K for problems too small to fill the GPU, and
// the backward pass (bwd_params.h: dQ, dK, dV and dBias, deterministic).
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_BACKEND_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace attnkit {
namespace cuda {

std::unique_ptr<Backend> MakeFlashBackend(const std::string& name = "cuda");

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_BACKEND_H_

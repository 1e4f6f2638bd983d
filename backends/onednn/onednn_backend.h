// The "onednn" backend: the block-GEMM backend (backends/blas/blas_backend.h)
// with oneDNN's matmul as its GEMM library (onednn_engine.h). Everything
// around the products (blocking, GQA stacking, causal panels, the online
// softmax in Highway row operations, masks, bias, softcap, LSE, the NaN rule,
// paged and ragged K/V, the backward pass) is the blas backend's code.
#ifndef ATTNKIT_BACKENDS_ONEDNN_ONEDNN_BACKEND_H_
#define ATTNKIT_BACKENDS_ONEDNN_ONEDNN_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "backends/blas/blas_backend.h"
#include "core/backend.h"

namespace attnkit {

// options.engine is replaced by a oneDNN engine. Unavailable when oneDNN
// cannot run here (OneDnnEngine::Create).
absl::StatusOr<std::unique_ptr<Backend>> MakeOneDnnBackend(BlasOptions options = {});

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_ONEDNN_ONEDNN_BACKEND_H_

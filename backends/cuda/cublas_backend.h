// "cuda-cublas": attention as two batched cuBLAS GEMMs with a masked-softmax
// kernel between them, over blocks of query rows so the score matrix stays
// within a fixed budget. The simple, trusted CUDA baseline.
#ifndef ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_
#define ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.h"

namespace attnkit {
namespace cuda {

std::unique_ptr<Backend> MakeCublasBackend(const std::string& name = "cuda-cublas");

// Bytes of scores, probabilities and output accumulators one query row costs
// (all G KV heads), and the number of query rows per block so a block fits
// `budget_bytes` (at least 1, at most q_len).
int64_t CublasBytesPerQueryRow(int64_t num_kv_heads, int64_t kv_len, int64_t head_dim,
                               int64_t elem_bytes);
int64_t CublasQueryBlock(int64_t q_len, int64_t bytes_per_row, int64_t budget_bytes);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUBLAS_BACKEND_H_

// Split-K merge: the partial results of the key splits, each normalised over
// its own keys, combined exactly through their log-sum-exps.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_launch.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per output row (b, h, i); lanes stride over V's head dim (dv).
// partial_lse: [splits, rows]; partial_o: [splits, rows, dv], rows = B*H*Tq.
__global__ void SplitCombineKernel(const FlashParams p) {
  const int64_t rows = int64_t{p.batch} * p.num_heads * p.q_len;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t i = row % p.q_len;
  const int64_t h = (row / p.q_len) % p.num_heads;
  const int64_t b = row / (int64_t{p.q_len} * p.num_heads);
  float max_lse = -INFINITY;
  bool poisoned = false;  // a split read a NaN or Inf: the row is NaN (fmaxf would drop it)
  for (int s = 0; s < p.num_splits; ++s) {
    const float lse = p.partial_lse[s * rows + row];
    max_lse = fmaxf(max_lse, lse);
    poisoned = poisoned || isnan(lse);
  }
  const Strides4& os = p.o_stride;
  const int64_t base = b * os.b + h * os.h + i * os.t;
  if (poisoned) {
    for (int c = lane; c < p.value_dim; c += 32) StoreElem(p.o, p.q_type, base + c * os.c, NAN);
    if (lane == 0 && p.lse != nullptr) {
      p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_t] = NAN;
    }
    return;
  }
  float total = 0.0f;
  if (max_lse != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) total += expf(p.partial_lse[s * rows + row] - max_lse);
  }
  // The merged row's multiplier and lse, the head's sink folded in.
  const RowFinish fin = WithSink(RowFinish{total > 0.0f ? 1.0f / total : 0.0f,
                                           total > 0.0f ? max_lse + logf(total) : -INFINITY},
                                 SinkOf(p, h));
  const float inv_total = fin.inv;
  for (int c = lane; c < p.value_dim; c += 32) {
    float acc = 0.0f;
    if (total > 0.0f) {
      for (int s = 0; s < p.num_splits; ++s) {
        const float w = expf(p.partial_lse[s * rows + row] - max_lse);
        acc += w * p.partial_o[(s * rows + row) * p.value_dim + c];
      }
    }
    StoreElem(p.o, p.q_type, base + c * os.c, acc * inv_total);
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_t] = fin.lse;
  }
}

}  // namespace

cudaError_t LaunchSplitCombine(const FlashParams& p, cudaStream_t stream) {
  const int64_t rows = int64_t{p.batch} * p.num_heads * p.q_len;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  SplitCombineKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace attnkit

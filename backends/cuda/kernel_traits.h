// Flash-attention kernel configuration: a traits struct per (head-dim bucket,
// compute kind), chosen by small constexpr rules, and the host heuristics
// that pick the bucket and the number of key splits. Host and device code.
#ifndef ATTNKIT_BACKENDS_CUDA_KERNEL_TRAITS_H_
#define ATTNKIT_BACKENDS_CUDA_KERNEL_TRAITS_H_

#include <cstdint>

#include "backends/cuda/flash_params.h"

namespace attnkit {
namespace cuda {

// The head dims compiled; a problem runs in the smallest bucket >= d, with
// Q, K and V zero-padded to the bucket in shared memory.
constexpr int kHeadDimBuckets[] = {32, 64, 128, 256};
constexpr int kMaxHeadDim = 256;
// Largest dynamic shared memory per block on sm_80 (A100); sm_90 allows more.
constexpr int kMaxSmemBytes = 166912;
// Rows of the query tile owned by one warp (one WMMA m16 strip).
constexpr int kRowsPerWarp = 16;
constexpr int kMaxSplits = 32;

// The bucket for head dim d, or 0 when d > kMaxHeadDim.
constexpr int HeadDimBucket(int d) {
  for (int b : kHeadDimBuckets) {
    if (d <= b) return b;
  }
  return 0;
}

// Query rows per block: 64 (four warps) unless the tiles of a large head dim
// would not fit the shared memory of sm_80.
constexpr int BlockMFor(int head_dim, ComputeKind c) {
  return head_dim >= (c == ComputeKind::kF32 ? 128 : 256) ? 32 : 64;
}
// Keys per tile: 64, halved for f32 at d = 256 (shared memory again).
constexpr int BlockNFor(int head_dim, ComputeKind c) {
  return (c == ComputeKind::kF32 && head_dim >= 256) ? 32 : 64;
}

constexpr int AlignUp(int x, int a) { return (x + a - 1) / a * a; }

// kRoundP (FlashParams::round_p, FAST only): P is rounded to the 16-bit
// compute type and O += P V runs on tensor cores. Without it P stays f32 and
// P V runs on the CUDA cores (V widened exactly from its tile), as EXACT
// requires; Q K^T runs on tensor cores for f16/bf16 tiles either way (the
// products of two 16-bit values are exact in its fp32 accumulation).
template <int kHeadDim_, ComputeKind kCompute_, bool kRoundP_>
struct FlashTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr ComputeKind kCompute = kCompute_;
  static constexpr bool kRoundP = kRoundP_;
  static constexpr bool kTensorCores = kCompute != ComputeKind::kF32;  // Q K^T
  static constexpr bool kTensorCoresPV = kTensorCores && kRoundP;      // P V
  static constexpr int kBlockM = BlockMFor(kHeadDim, kCompute);
  static constexpr int kBlockN = BlockNFor(kHeadDim, kCompute);
  static constexpr int kNWarps = kBlockM / kRowsPerWarp;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kElemBytes = kTensorCores ? 2 : 4;     // sQ, sK, sV
  static constexpr int kPElemBytes = kTensorCoresPV ? 2 : 4;  // sP
  // Leading dims (elements) of the shared-memory tiles. WMMA needs multiples
  // of 16 bytes; the f32 path pads by one word so that lanes reading one
  // column of K each hit a different bank; f32 P rows stay 16-byte aligned
  // (the CUDA-core P V reads four weights at a time).
  static constexpr int kLdQK = kHeadDim + (kTensorCores ? 8 : 1);  // sQ, sK, sV
  static constexpr int kLdS = kBlockN + 4;                         // scores, f32
  static constexpr int kLdP = kBlockN + (kTensorCoresPV ? 8 : 4);  // probabilities
  static constexpr int kLdO = kHeadDim + 4;                        // output accumulator, f32
  // Byte offsets of the tiles in dynamic shared memory, 128-byte aligned.
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = AlignUp(kOffQ + kBlockM * kLdQK * kElemBytes, 128);
  static constexpr int kOffV = AlignUp(kOffK + kBlockN * kLdQK * kElemBytes, 128);
  static constexpr int kOffS = AlignUp(kOffV + kBlockN * kLdQK * kElemBytes, 128);
  static constexpr int kOffP = AlignUp(kOffS + kBlockM * kLdS * 4, 128);
  static constexpr int kOffO = AlignUp(kOffP + kBlockM * kLdP * kPElemBytes, 128);
  // One flag per key of the V tile: its row holds a NaN or Inf.
  static constexpr int kOffVBad = AlignUp(kOffO + kBlockM * kLdO * 4, 128);
  // Per key of the K/V tile, found once per tile (a paged row reads the
  // block table once): the element offsets of its K and V rows (i64, -1 past
  // the sequence's keys), then their int8 or fp8 scales (f32, 1 for float
  // K/V).
  static constexpr int kOffKvRows = AlignUp(kOffVBad + kBlockN * 4, 128);
  static constexpr int kSmemBytes = AlignUp(kOffKvRows + kBlockN * (2 * 8 + 2 * 4), 128);

  static_assert(kHeadDim % 32 == 0, "lanes stride over head-dim columns by 32");
  static_assert(kBlockN % 32 == 0, "lanes stride over key columns by 32");
  static_assert(kBlockM % kRowsPerWarp == 0, "whole warps per query tile");
  static_assert(!kRoundP || kTensorCores, "16-bit P needs 16-bit tiles");
  static_assert(kLdP * kPElemBytes % 16 == 0, "P rows 16-byte aligned");
  static_assert(kSmemBytes <= kMaxSmemBytes, "tiles exceed sm_80 shared memory");
};

// The run-time view of one FlashTraits instance, for launching and logging.
struct KernelConfig {
  int head_dim = 0;  // the bucket
  int block_m = 0;
  int block_n = 0;
  int num_warps = 0;
  int smem_bytes = 0;
  bool tensor_core_pv = false;  // P V on tensor cores with 16-bit P (FAST)
};

template <class Traits>
constexpr KernelConfig ConfigOf() {
  return KernelConfig{Traits::kHeadDim, Traits::kBlockM,    Traits::kBlockN,
                      Traits::kNWarps,  Traits::kSmemBytes, Traits::kTensorCoresPV};
}

template <int D>
constexpr KernelConfig FlashConfigOf(ComputeKind c, bool round_p) {
  if (c == ComputeKind::kF32) {
    return round_p ? KernelConfig{} : ConfigOf<FlashTraits<D, ComputeKind::kF32, false>>();
  }
  if (c == ComputeKind::kF16) {
    return round_p ? ConfigOf<FlashTraits<D, ComputeKind::kF16, true>>()
                   : ConfigOf<FlashTraits<D, ComputeKind::kF16, false>>();
  }
  return round_p ? ConfigOf<FlashTraits<D, ComputeKind::kBF16, true>>()
                 : ConfigOf<FlashTraits<D, ComputeKind::kBF16, false>>();
}

// The configuration compiled for (bucket, compute, round_p); head_dim 0 when
// none is (a bucket not compiled, or round_p with f32 tiles).
constexpr KernelConfig FlashConfig(int bucket, ComputeKind c, bool round_p) {
  switch (bucket) {
    case 32:
      return FlashConfigOf<32>(c, round_p);
    case 64:
      return FlashConfigOf<64>(c, round_p);
    case 128:
      return FlashConfigOf<128>(c, round_p);
    case 256:
      return FlashConfigOf<256>(c, round_p);
    default:
      return KernelConfig{};
  }
}

// Key splits for split-K: 1 when the grid already fills the GPU; otherwise
// enough splits for about two blocks per SM, each split keeping at least two
// key tiles, at most kMaxSplits.
constexpr int ChooseNumSplits(int64_t num_blocks, int64_t num_key_tiles, int num_sms) {
  if (num_blocks <= 0 || num_blocks >= num_sms || num_key_tiles < 4) return 1;
  int64_t splits = (2 * int64_t{num_sms} + num_blocks - 1) / num_blocks;
  if (splits > num_key_tiles / 2) splits = num_key_tiles / 2;
  if (splits > kMaxSplits) splits = kMaxSplits;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

// The decode kernel (decode_kernel.cu) serves problems with few packed rows
// per KV head (Tq * group <= kDecodeMaxRows: decode and short speculative
// chunks), where a 64-row flash tile would leave most warps idle. A block
// owns kDecodeRows packed rows of one KV head; each of its kDecodeWarps warps
// walks its own key tiles of kDecodeTileKeys keys (one key per lane) with its
// own online softmax, and the warps merge through their LSE at the end.
constexpr int kDecodeRows = 8;
constexpr int kDecodeWarps = 4;
constexpr int kDecodeTileKeys = 32;
constexpr int kDecodeMaxRows = 16;

constexpr bool UseDecodeKernel(int64_t rows_per_kv_head) {
  return rows_per_kv_head <= kDecodeMaxRows;
}

template <int kHeadDim_>
struct DecodeTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kRows = kDecodeRows;
  static constexpr int kNWarps = kDecodeWarps;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kCols = kHeadDim / 32;  // output columns per lane
  // f32 tiles: sQ [kRows, kHeadDim]; per warp a K tile [32, kLdK] (odd
  // leading dim: lane j reads row j without bank conflicts). After the key
  // loop the K tiles' space holds the warps' partial results for the merge:
  // O [warps, kRows, kHeadDim], max and sum [warps, kRows], bad flags.
  static constexpr int kLdK = kHeadDim + 1;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = AlignUp(kRows * kHeadDim * 4, 128);
  static constexpr int kKTilesBytes = kNWarps * kDecodeTileKeys * kLdK * 4;
  static constexpr int kMergeBytes = kNWarps * kRows * (kHeadDim + 3) * 4;
  static constexpr int kSmemBytes =
      AlignUp(kOffK + (kKTilesBytes > kMergeBytes ? kKTilesBytes : kMergeBytes), 128);

  static_assert(kHeadDim % 32 == 0, "lanes own head-dim columns lane + 32u");
  static_assert(kRows <= 32, "one visibility bit per row in a 32-bit mask");
  static_assert(kSmemBytes <= kMaxSmemBytes, "tiles exceed sm_80 shared memory");
};

// The decode configuration for a compiled bucket; head_dim 0 otherwise.
// block_m is the rows per block, block_n the keys per warp tile.
constexpr KernelConfig DecodeConfig(int bucket) {
#define ATTNKIT_DECODE_CASE(D)                                         \
  if (bucket == D) {                                                   \
    return KernelConfig{D, kDecodeRows, kDecodeTileKeys, kDecodeWarps, \
                        DecodeTraits<D>::kSmemBytes};                  \
  }
  ATTNKIT_DECODE_CASE(32)
  ATTNKIT_DECODE_CASE(64)
  ATTNKIT_DECODE_CASE(128)
  ATTNKIT_DECODE_CASE(256)
#undef ATTNKIT_DECODE_CASE
  return KernelConfig{};
}

// Key splits for the decode kernel: ChooseNumSplits counted in groups of
// kDecodeWarps key tiles, so every warp of a split has a tile and each split
// covers at least 2 * kDecodeWarps * kDecodeTileKeys = 256 keys.
constexpr int ChooseDecodeSplits(int64_t num_blocks, int64_t num_key_tiles, int num_sms) {
  return ChooseNumSplits(num_blocks, (num_key_tiles + kDecodeWarps - 1) / kDecodeWarps, num_sms);
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_KERNEL_TRAITS_H_

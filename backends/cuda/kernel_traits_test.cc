// The kernel configuration heuristics, on the CPU: buckets, tile shapes and
// shared memory, split-K and the cuBLAS query blocking.
#include "backends/cuda/kernel_traits.h"

#include "backends/cuda/params.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace cuda {
namespace {

TEST(HeadDimBucketTest, SmallestCompiledBucketAtLeastD) {
  EXPECT_EQ(HeadDimBucket(1), 32);
  EXPECT_EQ(HeadDimBucket(16), 32);
  EXPECT_EQ(HeadDimBucket(32), 32);
  EXPECT_EQ(HeadDimBucket(33), 64);
  EXPECT_EQ(HeadDimBucket(80), 128);
  EXPECT_EQ(HeadDimBucket(96), 128);
  EXPECT_EQ(HeadDimBucket(128), 128);
  EXPECT_EQ(HeadDimBucket(129), 256);
  EXPECT_EQ(HeadDimBucket(256), 256);
  EXPECT_EQ(HeadDimBucket(257), 0);
}

TEST(FlashConfigTest, EveryCompiledInstanceFitsSm80) {
  for (int bucket : kHeadDimBuckets) {
    for (ComputeKind c : {ComputeKind::kF32, ComputeKind::kF16, ComputeKind::kBF16}) {
      for (bool round_p : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "bucket " << bucket << " compute " << int(c) << " round_p " << round_p);
        const KernelConfig k = FlashConfig(bucket, c, round_p);
        if (c == ComputeKind::kF32 && round_p) {
          EXPECT_EQ(k.head_dim, 0) << "f32 tiles have no 16-bit P instance";
          continue;
        }
        EXPECT_EQ(k.head_dim, bucket);
        EXPECT_EQ(k.block_m, k.num_warps * kRowsPerWarp);
        EXPECT_EQ(k.block_n % 32, 0);
        EXPECT_GT(k.smem_bytes, 0);
        EXPECT_LE(k.smem_bytes, kMaxSmemBytes);
        EXPECT_EQ(k.tensor_core_pv, round_p) << "P V on tensor cores exactly when P is 16-bit";
      }
    }
  }
  EXPECT_EQ(FlashConfig(48, ComputeKind::kF16, false).head_dim, 0) << "48 is not compiled";
}

// EXACT keeps P in f32 for P V (the CUDA-core path) on 16-bit tiles; only
// FAST (kRoundP) multiplies a 16-bit P on tensor cores. Both keep the tile
// shape of their compute kind; f32 P costs shared memory, not tile size.
TEST(FlashConfigTest, ExactKeepsPInF32) {
  using Exact = FlashTraits<128, ComputeKind::kBF16, false>;
  using Fast = FlashTraits<128, ComputeKind::kBF16, true>;
  static_assert(Exact::kTensorCores && !Exact::kTensorCoresPV, "Q K^T on tensor cores, P V not");
  static_assert(Fast::kTensorCores && Fast::kTensorCoresPV, "both on tensor cores");
  static_assert(Exact::kPElemBytes == 4 && Fast::kPElemBytes == 2, "f32 P vs bf16 P");
  static_assert(Exact::kBlockM == Fast::kBlockM && Exact::kBlockN == Fast::kBlockN, "same tiles");
  static_assert(Exact::kLdP % 4 == 0, "f32 P rows are read as float4");
  static_assert(Exact::kSmemBytes > Fast::kSmemBytes, "f32 P takes more shared memory");
  using F32 = FlashTraits<64, ComputeKind::kF32, false>;
  static_assert(!F32::kTensorCores && !F32::kTensorCoresPV && F32::kPElemBytes == 4, "f32");
  using F16D256 = FlashTraits<256, ComputeKind::kF16, false>;
  static_assert(F16D256::kSmemBytes <= kMaxSmemBytes, "the largest EXACT 16-bit instance fits");
  EXPECT_FALSE(FlashConfig(128, ComputeKind::kBF16, false).tensor_core_pv);
  EXPECT_TRUE(FlashConfig(128, ComputeKind::kBF16, true).tensor_core_pv);
  EXPECT_GT(FlashConfig(256, ComputeKind::kF16, false).smem_bytes,
            FlashConfig(256, ComputeKind::kF16, true).smem_bytes);
}

TEST(FlashConfigTest, TileShapes) {
  using Bf16D128 = FlashTraits<128, ComputeKind::kBF16, true>;
  static_assert(Bf16D128::kBlockM == 64 && Bf16D128::kBlockN == 64 && Bf16D128::kNWarps == 4,
                "the prefill configuration");
  static_assert(Bf16D128::kLdQK % 8 == 0 && Bf16D128::kLdP % 8 == 0,
                "WMMA leading dims are multiples of 16 bytes");
  static_assert(Bf16D128::kOffK % 128 == 0 && Bf16D128::kOffO % 128 == 0, "aligned tiles");
  using F32D256 = FlashTraits<256, ComputeKind::kF32, false>;
  static_assert(F32D256::kBlockM == 32 && F32D256::kBlockN == 32, "smaller tiles for f32 d256");
  static_assert(F32D256::kLdQK % 2 == 1, "odd f32 leading dim avoids bank conflicts");
  EXPECT_EQ(FlashConfig(256, ComputeKind::kBF16, false).block_m, 32);
  EXPECT_EQ(FlashConfig(256, ComputeKind::kBF16, true).block_m, 32);
  EXPECT_EQ(FlashConfig(64, ComputeKind::kF32, false).block_m, 64);
}

TEST(ChooseNumSplitsTest, SplitsOnlyWhenTheGridIsSmall) {
  // Decode, B=8, Hkv=8, one query tile per KV head, Tk=8192 (128 key tiles), 132 SMs.
  EXPECT_EQ(ChooseNumSplits(64, 128, 132), 5);
  // Prefill, B=4, H=32, T=4096: 64 query tiles x 32 heads x 4.
  EXPECT_EQ(ChooseNumSplits(64 * 32 * 4, 64, 132), 1);
  EXPECT_EQ(ChooseNumSplits(132, 1000, 132), 1);
  // Too few key tiles to share.
  EXPECT_EQ(ChooseNumSplits(1, 3, 132), 1);
  // Each split keeps at least two key tiles; at most kMaxSplits.
  EXPECT_EQ(ChooseNumSplits(1, 10, 132), 5);
  EXPECT_EQ(ChooseNumSplits(1, 100000, 132), kMaxSplits);
  EXPECT_EQ(ChooseNumSplits(0, 100, 132), 1);
  EXPECT_EQ(ChooseNumSplits(1, 100, 0), 1);
}

TEST(DecodeConfigTest, EveryBucketFitsSm80AndServesFewRows) {
  for (int bucket : kHeadDimBuckets) {
    const KernelConfig k = DecodeConfig(bucket);
    SCOPED_TRACE(testing::Message() << "bucket " << bucket);
    EXPECT_EQ(k.head_dim, bucket);
    EXPECT_EQ(k.block_m, kDecodeRows);
    EXPECT_EQ(k.block_n, 32) << "one key per lane";
    EXPECT_GT(k.smem_bytes, 0);
    EXPECT_LE(k.smem_bytes, kMaxSmemBytes);
  }
  EXPECT_EQ(DecodeConfig(48).head_dim, 0);
  // The merge buffers reuse the K tiles' space.
  using D128 = DecodeTraits<128>;
  static_assert(D128::kSmemBytes < D128::kOffK + D128::kKTilesBytes + D128::kMergeBytes,
                "merge aliases the K tiles");
  // Decode (Tq = 1) with up to 16 query heads per KV head, and speculative
  // chunks of a few tokens for small groups, take the decode kernel.
  EXPECT_TRUE(UseDecodeKernel(1));
  EXPECT_TRUE(UseDecodeKernel(8));      // Tq = 1, H/G = 8
  EXPECT_TRUE(UseDecodeKernel(4 * 4));  // Tq = 4, H/G = 4
  EXPECT_FALSE(UseDecodeKernel(17));
  EXPECT_FALSE(UseDecodeKernel(2048));  // prefill
}

TEST(DecodeConfigTest, SplitsKeepEveryWarpBusy) {
  // B=1, G=8 KV heads, one row tile each, Tk=4096 (128 tiles of 32): 32 groups
  // of four tiles, at most 16 splits of two groups (256 keys) each.
  EXPECT_EQ(ChooseDecodeSplits(8, 128, 132), 16);
  // B=8, G=8: 64 blocks; about two blocks per SM.
  EXPECT_EQ(ChooseDecodeSplits(64, 256, 132), 5);
  // Short caches are not split: fewer than four groups of tiles.
  EXPECT_EQ(ChooseDecodeSplits(1, 12, 132), 1);
  EXPECT_EQ(ChooseDecodeSplits(1, 16, 132), 2);
  // A full grid is not split.
  EXPECT_EQ(ChooseDecodeSplits(256, 4096, 132), 1);
}

TEST(CublasBlockingTest, QueryBlockFitsTheBudget) {
  // bf16 prefill B=4, H=G=32, T=4096, d=128: 32 * (4096 * 6 + 512) bytes a row.
  const int64_t row = CublasBytesPerQueryRow(32, 4096, 128, 2);
  EXPECT_EQ(row, 32 * (4096 * 6 + 512));
  const int64_t budget = int64_t{256} << 20;
  const int64_t nq = CublasQueryBlock(4096, row, budget);
  EXPECT_LE(nq * row, budget);
  EXPECT_GT((nq + 1) * row, budget);
  EXPECT_EQ(CublasQueryBlock(7, row, budget), 7);
  EXPECT_EQ(CublasQueryBlock(4096, budget * 2, budget), 1);
  // EXACT keeps P in f32: 4 bytes a probability, so fewer rows a block.
  const int64_t exact_row = CublasBytesPerQueryRow(32, 4096, 128, 4);
  EXPECT_EQ(exact_row, 32 * (4096 * 8 + 512));
  EXPECT_LT(CublasQueryBlock(4096, exact_row, budget), nq);
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit

// The machine limits hold up against a plain read loop: `peak`'s streaming
// read bandwidth is no lower than what a simple loop over a buffer well past
// the last-level cache reaches in the same process (a lower figure would
// flatter every "% of read bandwidth"), and it reports a sane spread.
#include "harness/machine.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "platform/machine_info.h"

namespace attnkit {
namespace {

// The reference: each thread sums its contiguous slice with eight scalar
// accumulators (the compiler vectorises it), the best of `trials` passes.
double PlainLoopGbps(const std::vector<float>& data, int threads, int trials) {
  const size_t chunk = data.size() / threads;
  double best = 0;
  std::vector<float> sums(threads);
  for (int trial = 0; trial < trials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float* p = data.data() + t * chunk;
        float acc[8] = {};
        for (size_t i = 0; i + 8 <= chunk; i += 8) {
          for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
        }
        for (float a : acc) sums[t] += a;
      });
    }
    for (std::thread& th : pool) th.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(chunk) * threads * sizeof(float) / s * 1e-9);
  }
  volatile float sink = sums[0];
  (void)sink;
  return best;
}

TEST(MachineTest, ReadBandwidthIsNoLowerThanAPlainLoop) {
  const int threads = 2;
  const ReadBandwidth ours = MeasureReadBandwidth(threads, /*passes=*/5);
  ASSERT_GT(ours.median_gbps, 0);
  EXPECT_LE(ours.min_gbps, ours.median_gbps);
  EXPECT_LE(ours.median_gbps, ours.max_gbps);
  EXPECT_EQ(ours.passes, 5);
  EXPECT_EQ(ours.llc_bytes, LastLevelCacheBytes());
  // Past the last-level cache (or at the 2 GiB cap).
  EXPECT_GE(ours.buffer_bytes, std::min<int64_t>(4 * ours.llc_bytes, int64_t{2} << 30));
  std::vector<float> data(static_cast<size_t>(ours.buffer_bytes) / sizeof(float), 1.0f);
  const double plain = PlainLoopGbps(data, threads, 3);
  // The fastest of our passes against the plain loop's best, with room for
  // this shared machine's noise.
  EXPECT_GE(ours.max_gbps, 0.85 * plain)
      << "median " << ours.median_gbps << " GB/s (spread " << ours.min_gbps << "-" << ours.max_gbps
      << ") against a plain loop's " << plain << " GB/s";
}

}  // namespace
}  // namespace attnkit

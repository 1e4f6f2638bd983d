#include "backends/blas/worker_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace blas {
namespace {

TEST(WorkerPoolTest, RunsEveryItemOnceOnValidWorkers) {
  for (int workers : {1, 2, 3}) {
    WorkerPool pool(workers);
    EXPECT_EQ(pool.size(), workers);
    for (int64_t n : {0, 1, 2, 5, 1000}) {
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<bool> bad_worker{false};
        pool.Run(n, [&](int w, int64_t item) {
          if (w < 0 || w >= workers) bad_worker = true;
          seen[static_cast<size_t>(item)].fetch_add(1);
        });
        EXPECT_FALSE(bad_worker);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i].load(), 1) << i;
      }
    }
  }
}

}  // namespace
}  // namespace blas
}  // namespace attnkit

#include "platform/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(ThreadPool, RunsEveryItemOnceAcrossManyRuns) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad_thread{false};
      pool.Run(n, [&](int64_t i, int t) {
        hits[i].fetch_add(1);
        if (t < 0 || t >= threads) bad_thread = true;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
      EXPECT_FALSE(bad_thread.load());
    }
  }
}

TEST(ThreadPool, DefaultUsesHardwareThreads) {
  ThreadPool pool(0);
  EXPECT_GE(pool.num_threads(), 1);
}

}  // namespace
}  // namespace attnkit

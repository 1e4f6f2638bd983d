// A persistent pool of worker threads for the CPU backends: created once,
// reused by every Forward call (Highway 1.0.3 ships no thread pool).
#ifndef ATTNKIT_PLATFORM_THREAD_POOL_H_
#define ATTNKIT_PLATFORM_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace attnkit {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread, so num_threads - 1 workers
  // are started. 0 means one per hardware thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(item, thread) for every item in [0, num_items), items handed out
  // dynamically; thread is in [0, num_threads()). Returns when all are done.
  // Not reentrant: one Run at a time.
  void Run(int64_t num_items, absl::FunctionRef<void(int64_t, int)> fn);

 private:
  void WorkerLoop(int thread);
  void Drain(int thread);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Written under mu_; atomic so that workers and the caller can spin on
  // them briefly before sleeping (see kSpinRounds and kCallerWait in
  // thread_pool.cc).
  std::atomic<uint64_t> generation_{0};  // bumped by each Run
  std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
  // The current job, valid while busy_workers_ > 0 or the caller drains.
  absl::FunctionRef<void(int64_t, int)>* job_ = nullptr;
  int64_t num_items_ = 0;
  std::atomic<int64_t> next_{0};
};

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_THREAD_POOL_H_

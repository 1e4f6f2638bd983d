#include "platform/thread_pool.h"

#include <chrono>
#include <thread>

namespace attnkit {
namespace {

// Workers wait for the next Run by spinning this many rounds of a CPU
// pause (about 50 us on Zen 3) before sleeping on a condition variable
// (Run's caller waits for the workers longer: kCallerWait). A decode step
// is a few calls of about a millisecond each, back to back; a futex
// wake-up per call costs tens of microseconds on a virtual machine, for
// every call and both directions. OpenMP runtimes spin-wait for the same
// reason (GOMP_SPINCOUNT).
constexpr int kSpinRounds = 2048;

// Run's caller, its own items done, waits for the workers' last ones
// longer: kCallerWait more after the first kSpinRounds pauses, yielding
// its core every 64 pauses then (so that a worker sharing it, with more
// threads than cores, runs), and only then sleeps. It has nothing else to
// do, and 2048 pauses lasted under 50 us on a Xeon with AMX, so a last
// item longer than that cost a futex wake-up on top (20-50 us on a
// virtual machine). A pool of 2 threads after a 3 ms gap, 64 items of 78
// us, 300 runs: the caller back 20-27 us after the last item (median; p90
// 47-48) -> 1.5 (p90 3.1-3.3).
constexpr std::chrono::microseconds kCallerWait{1000};

inline void CpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  num_threads_ = num_threads;
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) {
    workers_.emplace_back([this, t] { WorkerLoop(t); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::Drain(int thread) {
  for (;;) {
    const int64_t item = next_.fetch_add(1, std::memory_order_relaxed);
    if (item >= num_items_) return;
    (*job_)(item, thread);
  }
}

void ThreadPool::Run(int64_t num_items, absl::FunctionRef<void(int64_t, int)> fn) {
  if (num_items <= 0) return;
  if (workers_.empty() || num_items == 1) {
    for (int64_t i = 0; i < num_items; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    num_items_ = num_items;
    next_.store(0, std::memory_order_relaxed);
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  Drain(0);
  std::chrono::steady_clock::time_point deadline;  // set once the pauses alone are done
  for (int i = 0; busy_workers_.load(std::memory_order_acquire) != 0; ++i) {
    CpuPause();
    if (i == kSpinRounds) deadline = std::chrono::steady_clock::now() + kCallerWait;
    if (i > kSpinRounds && (i & 63) == 0) {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > deadline) break;
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return busy_workers_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load(std::memory_order_acquire) == seen &&
                    !stop_.load(std::memory_order_relaxed);
         ++i) {
      CpuPause();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain(thread);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace attnkit

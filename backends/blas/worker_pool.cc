#include "backends/blas/worker_pool.h"

namespace attnkit {
namespace blas {

WorkerPool::WorkerPool(int num_workers) {
  for (int w = 1; w < num_workers; ++w) threads_.emplace_back([this, w] { ThreadMain(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::Drain(int worker) {
  for (int64_t item = next_.fetch_add(1); item < num_items_; item = next_.fetch_add(1)) {
    (*fn_)(worker, item);
  }
}

void WorkerPool::Run(int64_t num_items, absl::FunctionRef<void(int, int64_t)> fn) {
  if (threads_.empty() || num_items <= 1) {
    for (int64_t item = 0; item < num_items; ++item) fn(0, item);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    num_items_ = num_items;
    next_.store(0);
    busy_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  Drain(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return busy_ == 0; });
  fn_ = nullptr;
}

void WorkerPool::ThreadMain(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain(worker);
    std::lock_guard<std::mutex> lock(mu_);
    if (--busy_ == 0) done_cv_.notify_one();
  }
}

}  // namespace blas
}  // namespace attnkit

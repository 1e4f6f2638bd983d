// A fixed set of threads, created once, that run the items of one parallel
// loop; the calling thread takes part. Threads block (not spin) between
// loops, so an idle pool leaves the cores to OpenBLAS's own threads.
#ifndef ATTNKIT_BACKENDS_BLAS_WORKER_POOL_H_
#define ATTNKIT_BACKENDS_BLAS_WORKER_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace attnkit {
namespace blas {

class WorkerPool {
 public:
  // `num_workers` >= 1 counts the caller: num_workers - 1 threads are started.
  explicit WorkerPool(int num_workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Calls fn(worker, item) once for every item in [0, num_items), items taken
  // in increasing order by the first free worker; worker is in [0, size()).
  // Returns when all are done. Not reentrant: one loop at a time.
  void Run(int64_t num_items, absl::FunctionRef<void(int, int64_t)> fn);

 private:
  void ThreadMain(int worker);
  void Drain(int worker);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped once per Run
  int busy_ = 0;             // guarded by mu_; threads still in the current loop
  bool stop_ = false;        // guarded by mu_
  // The current loop; written before generation_ is bumped under mu_.
  absl::FunctionRef<void(int, int64_t)>* fn_ = nullptr;
  int64_t num_items_ = 0;
  std::atomic<int64_t> next_{0};
};

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_WORKER_POOL_H_

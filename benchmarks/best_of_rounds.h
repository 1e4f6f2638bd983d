// The timer of the kernel microbenchmarks (decode_kernels_bench,
// prefill_kernels_bench): the best of five rounds of `reps` calls, in
// seconds a call. An empty asm with a memory clobber after each call
// keeps its stores, so the compiler drops no repeated call.
#ifndef ATTNKIT_BENCHMARKS_BEST_OF_ROUNDS_H_
#define ATTNKIT_BENCHMARKS_BEST_OF_ROUNDS_H_

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace attnkit {

template <class F>
double BestSecondsPerCall(size_t reps, F&& call) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < reps; ++r) {
      call();
      asm volatile("" : : : "memory");  // each call's stores stay
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s / static_cast<double>(reps));
  }
  return best;
}

}  // namespace attnkit

#endif  // ATTNKIT_BENCHMARKS_BEST_OF_ROUNDS_H_

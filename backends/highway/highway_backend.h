// The "highway" backend: streaming flash attention on the CPU, SIMD through
// Highway with run-time target dispatch, threads from a persistent pool.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_HIGHWAY_BACKEND_H_
#define ATTNKIT_BACKENDS_HIGHWAY_HIGHWAY_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace attnkit {

struct HighwayOptions {
  // Threads including the caller; 0 = one per hardware thread, or
  // $ATTNKIT_HWY_THREADS when set.
  int num_threads = 0;
  // A Highway target name ("AVX2", "SSE4", "EMU128", ...) to force instead of
  // the best one. Empty = dynamic dispatch, which $ATTNKIT_HWY_TARGET caps
  // process-wide (the backend is unavailable when that target is not here).
  std::string target;
  std::string name = "highway";
};

std::unique_ptr<Backend> MakeHighwayBackend(const HighwayOptions& options = {});

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_HIGHWAY_BACKEND_H_

// Flash attention on the CPU with Highway: the plain C++ entry points. The
// per-target code is in sdpa-inl.h, compiled for every target in
// third_party/highway/targets.bzl by sdpa.cc and chosen at run time.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_SDPA_H_
#define ATTNKIT_BACKENDS_HIGHWAY_SDPA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/highway/flash_params.h"
#include "backends/highway/workspace.h"
#include "platform/thread_pool.h"

namespace attnkit {

// Computes o (and lse) for `p`. `target` is a single HWY_* bit to force a
// compiled, supported target, or 0 for the best one (HWY_DYNAMIC_DISPATCH,
// which also honours hwy::SetSupportedTargetsForTest).
absl::Status FlashAttention(const FlashParams& p, int64_t target, ThreadPool* pool, Workspace* ws,
                            FlashRunInfo* info);
// The same for the n sequences of a ragged batch, in one parallel loop over
// all their work (n == 1: exactly the call above).
absl::Status FlashAttention(const FlashParams* p, size_t n, int64_t target, ThreadPool* pool,
                            Workspace* ws, FlashRunInfo* info);

// The targets compiled into sdpa.cc that this CPU supports, best first.
std::vector<int64_t> AvailableFlashTargets();

// Parses a target name ("AVX2", "avx3_dl", "SCALAR", ...) into its HWY_* bit;
// FailedPrecondition naming the available targets when it is unknown, not
// compiled or not supported by this CPU.
absl::StatusOr<int64_t> ParseFlashTarget(const std::string& name);

// fp8 decode tiles the folded reads handed back (a special code, or more
// than a few subnormal codes: microkernels-inl.h's Fp8RowsNeedDecoding) and
// that ran decoded instead, over the process's calls on every thread; for
// tests and benchmarks. CountFp8TileRunDecoded adds one (sdpa-inl.h).
int64_t Fp8TilesRunDecoded();
void CountFp8TileRunDecoded();
// The E4M3 tiles the folded reads handed back for their subnormal codes
// alone (no special code) that ran through f16 with the 2^8 folded
// (microkernels-inl.h's Fp8HalfFolded: x86 from AVX2 up) instead, not
// counted above; CountFp8TileRunHalf adds one.
int64_t Fp8TilesRunHalf();
void CountFp8TileRunHalf();

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_SDPA_H_

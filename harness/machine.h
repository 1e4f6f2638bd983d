// The machine a benchmark runs on: its fingerprint, and its limits (peak FMA
// per Highway target, streaming read bandwidth, OpenBLAS sgemm) measured here
// and cached per CPU model and thread count.
#ifndef ATTNKIT_HARNESS_MACHINE_H_
#define ATTNKIT_HARNESS_MACHINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "harness/records.pb.h"
#include "platform/machine_info.h"

namespace attnkit {

MachineFingerprint Fingerprint(int threads);

// Streaming read bandwidth with `threads` threads: `passes` timed passes
// (after one warm-up) over a buffer of four times the last-level cache (at
// least 256 MiB, at most 2 GiB) by compare's PairedReadLoop (chunks summed
// as four interleaved streams of the widest vectors); the median pass and
// the spread.
struct ReadBandwidth {
  double median_gbps = 0, min_gbps = 0, max_gbps = 0;
  int passes = 0;
  int64_t buffer_bytes = 0;
  int64_t llc_bytes = 0;
};
ReadBandwidth MeasureReadBandwidth(int threads, int passes = 7);

// Measures the limits now with `threads` threads (a few seconds).
MachineLimits MeasureLimits(int threads);

// One short pass of the compute peaks (the best target's FMA loop and the
// bf16 dot-product loop, `trials` runs of about 10 ms each), folded into
// `limits`: the peaks stay the maxima over every pass (contention can only
// lower a pass), peak_*_min and peak_passes record the spread. Limits of
// another CPU (no target named best_target here) are left as they are.
void AddPeakPass(int threads, MachineLimits* limits, int trials = 1);

// The cached limits for this CPU and thread count, or a fresh measurement
// (saved to the cache) when there is none or `refresh` is set. `how` says
// which ("cached in F", "measured now").
MachineLimits LoadOrMeasureLimits(int threads, bool refresh, std::string* how);

// The machine as `peak --json` and the C API's attnkit_machine_limits give
// it: {"attnkit": build, "how": measured now or cached, "machine":
// fingerprint, "limits": limits}.
std::string MachineLimitsJson(const MachineFingerprint& machine, const MachineLimits& limits,
                              const std::string& how);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_MACHINE_H_

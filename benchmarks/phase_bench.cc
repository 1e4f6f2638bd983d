// Where the Highway forward spends its time, phase by phase (issue 34): the
// standard suite's forward problems on the phase-timed build of the backend
// (backends/highway/phase_timing.h), each phase as a share of the threads'
// time and, for Q.K and P.V, the rate it reaches while it runs as a
// fraction of the FMA peak measured in the same run.
//   bazel run //benchmarks:phase_bench -- [filter] [threads] [seconds] [fp8 scales] [paired]
// filter: a substring of the problem names (default: every f32 prefill,
// "prefill"), or a text-format config file (a name ending in .textproto:
// that problem alone, e.g. a suite shape with a shorter kv_len to see it
// with K and V in cache); threads: default 2; seconds: timed per problem
// (default 1); fp8 scales (fp8 K/V only; default: the random inputs' own
// scale per row, max|x| / the format's largest, whose rows hold almost no
// subnormal code): K and V redrawn from N(0, 1) and stored with one scale
//   unit-scale: 1, as vLLM stores an fp8 cache without calibrated scales
//     (with E4M3 about 1.2 % of the codes subnormal: |x| < 2^-6);
//   tensor-scale: each tensor's max|x| / the format's largest (E4M3: about
//     one subnormal code in 6,000).
// paired (after the other arguments, any problem): after each timed call,
// one untimed pass of `attnkit compare`'s paired read loop over as many
// bytes as the problem moves (harness/paired_read.h), so each call meets
// its K and V where compare's calls do, after a problem-sized read (as a
// model's decode meets a layer's cache after the other layers' traffic),
// rather than where the last call left them; the loop's median GB/s and
// the call's share of it are printed as compare prints them.
// The marks cost a few ns per phase per tile: the printed wall time is a
// little above an untimed build's (compare it with `attnkit compare`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "backends/highway/highway_backend.h"
#include "backends/highway/phase_timing.h"
#include "backends/highway/sdpa.h"
#include "core/fp8.h"
#include "core/problem.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/machine_kernels.h"
#include "harness/paired_read.h"
#include "harness/problem_data.h"
#include "harness/suite.h"
#include "io/config_io.h"
#include "ops/cost.h"
#include "platform/median.h"

namespace attnkit {
namespace {

namespace pt = phase_timing;

// The forward problems `filter` names: a config file's problem, or the
// standard suite's whose names contain it.
absl::StatusOr<std::vector<AttentionProblem>> ForwardProblems(const std::string& filter) {
  std::vector<AttentionProblem> problems;
  if (absl::EndsWith(filter, ".textproto")) {
    // Relative to where `bazel run` was called from (it runs us elsewhere).
    const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
    const std::string path =
        filter.front() != '/' && cwd != nullptr ? std::string(cwd) + "/" + filter : filter;
    ATTNKIT_ASSIGN_OR_RETURN(AttentionConfig config, LoadConfigFile(path));
    ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem problem, ProblemFromConfig(config));
    if (problem.backward) {
      return absl::InvalidArgumentError(filter +
                                        ": backward is true; phase_bench times forward "
                                        "passes (set it false)");
    }
    problems.push_back(std::move(problem));
    return problems;
  }
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<AttentionProblem> suite, LoadSuite("standard"));
  for (AttentionProblem& p : suite) {
    if (!p.backward && absl::StrContains(p.name, filter)) problems.push_back(std::move(p));
  }
  return problems;
}

// fp8 K and V (any layout: every code) redrawn from N(0, 1) and encoded with
// one scale per tensor: 1, or (per_tensor_max) the tensor's max|x| / the
// format's largest; the scale tensors set to it.
void RedrawFp8WithOneScale(const AttentionProblem& p, bool per_tensor_max, ProblemData& data) {
  std::mt19937_64 rng(p.seed * 4 + 5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Fp8Format format = Fp8FormatOf(p.kv_dtype);
  for (auto [t, scales] : {std::pair{&data.k, &data.k_scale}, {&data.v, &data.v_scale}}) {
    std::vector<float> x(static_cast<size_t>(t->view().NumElements()));
    float max_abs = 0;
    for (float& v : x) {
      v = normal(rng);
      max_abs = std::max(max_abs, std::fabs(v));
    }
    const float scale = per_tensor_max ? max_abs / Fp8Max(format) : 1.0f;
    auto* codes = static_cast<uint8_t*>(t->data());
    for (size_t i = 0; i < x.size(); ++i) codes[i] = EncodeFp8(x[i] / scale, format);
    auto* s = static_cast<float*>(scales->data());
    std::fill(s, s + scales->view().NumElements(), scale);
  }
}

int Main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "prefill";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 1.0;
  std::string scales;
  bool paired = false, usage_error = threads < 1 || seconds <= 0;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "paired" && !paired) {
      paired = true;
    } else if ((arg == "unit-scale" || arg == "tensor-scale") && scales.empty() && !paired) {
      scales = arg;
    } else {
      usage_error = true;
    }
  }
  if (usage_error) {
    std::fprintf(stderr,
                 "usage: phase_bench [filter] [threads >= 1] [seconds > 0] "
                 "[unit-scale | tensor-scale] [paired]\n");
    return 2;
  }
  std::unique_ptr<PairedReadLoop> read_loop;
  if (paired) read_loop = std::make_unique<PairedReadLoop>(threads);
  auto problems = ForwardProblems(filter);
  if (!problems.ok()) {
    std::fprintf(stderr, "%s\n", std::string(problems.status().message()).c_str());
    return 1;
  }
  auto backend = MakeHighwayBackend({threads});
  const std::vector<int64_t> targets = AvailableHighwayTargets();
  const double tps = pt::TicksPerSecond();
  std::printf("phase_bench: %d threads, %s, %.0f MHz time-stamp counter\n", threads,
              HighwayTargetName(targets.front()).c_str(), tps * 1e-6);
  for (const AttentionProblem& p : *problems) {
    auto data = ProblemData::Random(p, p.seed);
    if (!data.ok()) {
      std::fprintf(stderr, "%s: %s\n", p.name.c_str(),
                   std::string(data.status().message()).c_str());
      return 1;
    }
    if (!scales.empty()) {
      if (!IsFp8(p.kv_dtype)) {
        std::printf("%s: %s is for fp8 K/V; skipped\n", p.name.c_str(), scales.c_str());
        continue;
      }
      RedrawFp8WithOneScale(p, scales == "tensor-scale", *data);
    }
    const int64_t bytes = ComputeCost(p).bytes_moved;
    if (read_loop != nullptr && !read_loop->Resize(bytes)) {
      std::fprintf(stderr, "%s: no memory for a %lld-byte read loop\n", p.name.c_str(),
                   static_cast<long long>(bytes));
      return 1;
    }
    RunInfo info;
    if (auto s = backend->Forward(p, data->args(), &info); !s.ok()) {  // warm-up
      std::printf("%s: %s\n", p.name.c_str(), std::string(s.message()).c_str());
      continue;
    }
    // The peak: the highest of three short passes just before the timing
    // and three just after.
    const double peak_before =
        MeasureFmaGflops(targets.front(), threads, 3, kFmaLoopIterations / 4);
    pt::Take();
    const int64_t decoded_before = Fp8TilesRunDecoded(), half_before = Fp8TilesRunHalf();
    std::vector<double> times, reads;
    const auto begin = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (times.size() < 3 || elapsed < seconds) {
      const auto start = std::chrono::steady_clock::now();
      if (!backend->Forward(p, data->args(), &info).ok()) return 1;
      const auto end = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double>(end - start).count());
      if (read_loop != nullptr) reads.push_back(read_loop->TimeOnePass());
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    }
    const pt::Totals totals = pt::Take();
    const int64_t decoded = Fp8TilesRunDecoded() - decoded_before;
    const int64_t half = Fp8TilesRunHalf() - half_before;
    // And after: the peak is the higher (contention only lowers a pass).
    const double peak = std::max(
        peak_before, MeasureFmaGflops(targets.front(), threads, 3, kFmaLoopIterations / 4));
    const double calls = static_cast<double>(times.size());
    double wall = 0;
    for (double t : times) wall += t;
    const double median_s = Median(times);
    const double flops = UsefulFlops(p);
    std::printf("\n%s  [%s]\n  %s\n  median %.3f ms, %.1f GFLOP/s = %.1f %% of peak FMA %.1f\n",
                p.name.c_str(), p.Id().c_str(), info.kernel.c_str(), median_s * 1e3,
                flops / median_s * 1e-9, 100.0 * flops / median_s * 1e-9 / peak, peak);
    if (!reads.empty()) {  // as compare: GB/s of the medians, the call's share
      std::sort(reads.begin(), reads.end());
      const double call_gbps = static_cast<double>(bytes) / median_s * 1e-9;
      // The loop reads its own bytes (at least 64 KiB, whole chunks).
      const double loop_bytes = static_cast<double>(read_loop->bytes());
      const double read_gbps = loop_bytes / Median(reads) * 1e-9;
      std::printf("  paired read loop %.1f GB/s (%.1f-%.1f), the call %.1f GB/s = %.1f %% of it\n",
                  read_gbps, loop_bytes / reads.back() * 1e-9, loop_bytes / reads.front() * 1e-9,
                  call_gbps, 100.0 * call_gbps / read_gbps);
    }
    if (IsFp8(p.kv_dtype)) {  // microkernels-inl.h's Fp8RowsNeedDecoding
      std::printf(
          "  fp8 tiles handed back by the folded reads: decoded (a special code, E5M2's many "
          "subnormal codes, or Q or a V scale too large to fold) %.1f a call; through f16 "
          "(E4M3's many subnormal codes) %.1f\n",
          static_cast<double>(decoded) / calls, static_cast<double>(half) / calls);
    }
    // Thread-seconds per call of each phase; the threads' time is wall * threads.
    const double thread_seconds = wall * threads / calls;
    double accounted = 0;
    std::printf("  %-12s %9s %8s  %s\n", "phase", "ms/call", "% time", "rate while running");
    for (int i = 0; i < pt::kPhases; ++i) {
      const double s = static_cast<double>(totals.ticks[i]) / tps / calls;  // thread-seconds
      if (s <= 0) continue;
      accounted += s;
      std::string rate;
      if (i == pt::kQK || i == pt::kPV) {
        // Half the useful FLOPs each, on one thread's share of the peak.
        const double gflops = 0.5 * flops / s * 1e-9;
        rate = absl::StrFormat("%.1f GFLOP/s per thread = %.1f %% of a thread's peak", gflops,
                               100.0 * gflops / (peak / threads));
      }
      std::printf("  %-12s %9.3f %7.1f%%  %s\n", pt::PhaseName(i), s / threads * 1e3,
                  100.0 * s / thread_seconds, rate.c_str());
    }
    std::printf(
        "  %-12s %9.3f %7.1f%%  (outside items: V prepared once per call, merges, the "
        "pool's hand-offs and idle threads)\n",
        "other", (thread_seconds - accounted) / threads * 1e3,
        100.0 * (thread_seconds - accounted) / thread_seconds);
  }
  return 0;
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) { return attnkit::Main(argc, argv); }

// Google Benchmark suite: every registered backend x the standard suite
// (harness/suite/standard/), on data placed once per backend. Counters:
// useful GFLOP/s (4 * d * unblocked pairs), GB/s of Q, K, V, O, and the
// percentage of this machine's limit measured at start-up (peak FMA for
// compute-bound problems, read bandwidth for memory-bound ones).
//
//   bazel run //benchmarks:attention_bench -- --benchmark_filter=highway
//   (flags: --threads=N; --plugins=a.so to add plugin backends)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "backends/builtin.h"
#include "benchmark/benchmark.h"
#include "harness/execute.h"
#include "harness/grad_data.h"
#include "harness/machine.h"
#include "harness/problem_data.h"
#include "harness/suite.h"
#include "ops/cost.h"

namespace attnkit {
namespace {

struct BenchContext {
  MachineLimits limits;
  int threads = 1;
};

void RunAttention(benchmark::State& state, Backend* backend, AttentionProblem p,
                  const BenchContext* ctx) {
  auto data = ProblemData::Random(p, p.seed);
  if (!data.ok()) return state.SkipWithError(std::string(data.status().message()).c_str());
  auto placed = PlacedProblem::Place(backend, *data);
  if (!placed.ok()) return state.SkipWithError(std::string(placed.status().message()).c_str());
  RunInfo info;
  // A _bwd problem times its backward pass, from one forward's O and lse.
  GradData grads;
  if (p.backward) {
    absl::Status s = RunOnBackend(backend, p, *data, &info);
    absl::StatusOr<GradData> g = GradData::Random(p, p.seed, p.additive_bias);
    if (s.ok() && !g.ok()) s = g.status();
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    grads = std::move(*g);
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    absl::Status s;
    if (!p.backward) {
      s = placed->Forward(p, &info);
      if (s.ok()) s = backend->Synchronize();
    } else if (backend->UsesHostMemory()) {
      s = backend->Backward(p, data->args(), grads.args(), &info);
    } else {  // transfers included
      s = RunBackwardOnBackend(backend, p, *data, grads, &info);
    }
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      std::max<double>(1, state.iterations());
  const CostReport cost = ComputeCost(p);
  const double balance = ctx->limits.peak_fma_gflops() / std::max(1e-9, ctx->limits.read_gbps());
  const bool memory_bound = cost.useful_flops / double(cost.bytes_moved) < balance;
  state.counters["GFLOP/s"] =
      benchmark::Counter(cost.useful_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(double(cost.bytes_moved) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  // Percentage of the limit that applies: read bandwidth when memory-bound.
  state.counters[memory_bound ? "%read_bw" : "%peak_fma"] =
      memory_bound ? 100.0 * double(cost.bytes_moved) * 1e-9 / seconds / ctx->limits.read_gbps()
                   : 100.0 * cost.useful_flops * 1e-9 / seconds / ctx->limits.peak_fma_gflops();
  state.SetLabel(info.kernel);
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  using namespace attnkit;
  auto* ctx = new BenchContext;
  ctx->threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      ctx->threads = std::max(1, std::atoi(argv[i] + 10));
    } else if (std::strncmp(argv[i], "--plugins=", 10) == 0) {
      GlobalRegistry().LoadPluginList(argv[i] + 10);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  std::string how;
  ctx->limits = LoadOrMeasureLimits(ctx->threads, /*refresh=*/true, &how);
  std::fprintf(stderr,
               "machine limits (%s): peak FMA %.1f GFLOP/s (%s), read %.1f GB/s, sgemm %.1f "
               "GFLOP/s (%s); %d threads\n",
               how.c_str(), ctx->limits.peak_fma_gflops(), ctx->limits.best_target().c_str(),
               ctx->limits.read_gbps(), ctx->limits.sgemm_gflops(),
               ctx->limits.openblas_core().c_str(), ctx->threads);
  auto suite = LoadSuite("standard");
  if (!suite.ok()) {
    std::fprintf(stderr, "%s\n", std::string(suite.status().message()).c_str());
    return 1;
  }
  for (Backend* backend : GlobalRegistry().All()) {
    if (!backend->SetNumThreads(ctx->threads).ok()) continue;
    for (const AttentionProblem& p : *suite) {
      const std::string name = backend->Name() + "/" + p.Id();
      if (!backend->Supports(p).ok()) continue;
      if (p.backward && !backend->SupportsBackward(p).ok()) continue;
      benchmark::RegisterBenchmark(name.c_str(), RunAttention, backend, p, ctx)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.2);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// The blas backend against OpenBLAS's own sgemm, in one process:
//   bazel run -c opt //benchmarks:blas_bench
// Every attention benchmark reports useful GFLOP/s (4 d x visible pairs,
// core/problem.h UsefulFlops) and, because this machine is shared and noisy,
// a 2048^3 sgemm timed right after it ("sgemm_GFLOP/s", best of 2) and the
// ratio of the two ("vs_sgemm"). BM_Sgemm times sgemm on its own.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/blas/blas_backend.h"
#include "benchmark/benchmark.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

constexpr int kThreads = 2;
constexpr int kSgemmN = 2048;

// Best rate of `reps` n^3 sgemm calls on `threads` OpenBLAS threads, GFLOP/s.
double MeasureSgemm(int n, int reps, int threads) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  openblas_set_num_threads(threads);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::max(best, 2.0 * n * n * n / dt.count() * 1e-9);
  }
  return best;
}

// C [n, n] = A [n, n] . B [n, n] with OpenBLAS's threads: 2 n^3 FLOPs. At
// n = 2048 that is the FLOP count of the H=16, T=2048, d=64 non-causal case.
void BM_Sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  openblas_set_num_threads(kThreads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * n * n * n;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(openblas_get_corename());
}

struct Variant {
  const char* name;
  BlasThreading threading;
  bool stack;
  int64_t target_rows;
  int64_t max_key_chunk = 0;
  int threads = kThreads;
  int64_t panel_rows = 64;
};

void RunAttention(benchmark::State& state, const AttentionProblem& p, const Variant& v) {
  BlasOptions o;
  o.num_threads = v.threads;
  o.threading = v.threading;
  o.stack_group_heads = v.stack;
  o.target_rows = v.target_rows;
  o.max_key_chunk = v.max_key_chunk;
  o.panel_rows = v.panel_rows;
  BlasBackend backend(o);
  auto data = ProblemData::Random(p, 1);
  if (!data.ok()) return state.SkipWithError(std::string(data.status().message()).c_str());
  const AttentionArgs args = data->args();
  RunInfo info;
  const absl::Status warm = backend.Forward(p, args, &info);  // allocates the workspace
  if (!warm.ok()) return state.SkipWithError(std::string(warm.message()).c_str());
  for (auto _ : state) {
    benchmark::DoNotOptimize(backend.Forward(p, args).ok());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(UsefulFlops(p) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // The timed loop has ended; this sgemm is not part of the attention time.
  state.counters["sgemm_GFLOP/s"] = MeasureSgemm(kSgemmN, 2, v.threads);
  state.SetLabel(info.kernel);
}

AttentionProblem Problem(int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d, MaskKind mask) {
  AttentionProblem p;
  p.num_heads = h;
  p.num_kv_heads = g;
  p.q_len = tq;
  p.kv_len = tk;
  p.head_dim = d;
  p.model_dim = h * d;
  p.mask = mask;
  p.alignment = Alignment::kBottomRight;
  p.scale = 1.0f / std::sqrt(float(d));
  return p;
}

// Registers one attention benchmark.
void Register(const std::string& name, const AttentionProblem& p, const Variant& v) {
  benchmark::RegisterBenchmark(name.c_str(), [p, v](benchmark::State& s) { RunAttention(s, p, v); })
      ->UseRealTime()
      ->MeasureProcessCPUTime()
      ->Unit(benchmark::kMillisecond);
}

// Adds vs_sgemm = GFLOP/s / sgemm_GFLOP/s to every run that has both
// (repetition aggregates included).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      const auto rate = r.counters.find("GFLOP/s");
      const auto sgemm = r.counters.find("sgemm_GFLOP/s");
      if (rate == r.counters.end() || sgemm == r.counters.end() || sgemm->second.value <= 0) {
        continue;
      }
      r.counters["vs_sgemm"] = benchmark::Counter(rate->second.value / sgemm->second.value);
    }
    ConsoleReporter::ReportRuns(out);
  }
};

void RegisterAll() {
  benchmark::RegisterBenchmark("BM_Sgemm", BM_Sgemm)
      ->Arg(2048)
      ->Arg(1024)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  const Variant items{"items", BlasThreading::kItems, true, 256};
  const Variant blas{"openblas", BlasThreading::kBlas, true, 256};
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal}) {
    const AttentionProblem p = Problem(16, 16, 2048, 2048, 64, mask);
    for (const Variant& v : {items, blas}) {
      Register(absl::StrCat("BM_Blas/mha_h16_t2048_d64_", MaskKindName(mask), "/", v.name), p, v);
    }
  }
  // GQA: the group's 4 heads stacked (64 positions, 16-position diagonal
  // panels) vs each head on its own over the same token blocks, and per head
  // with 256-position blocks (64-position diagonal panels), its best.
  const AttentionProblem gqa = Problem(32, 8, 1024, 1024, 128, MaskKind::kCausal);
  Register("BM_Blas/gqa_h32_g8_t1024_d128_causal/stacked", gqa, items);
  Register("BM_Blas/gqa_h32_g8_t1024_d128_causal/per_head", gqa,
           {"per_head", BlasThreading::kItems, false, 256});
  Register("BM_Blas/gqa_h32_g8_t1024_d128_causal/per_head_rows256", gqa,
           {"per_head_rows256", BlasThreading::kItems, false, 1024});
  // One thread (less exposed to other jobs on the machine; compare with
  // gemm_shapes_bench's BM_KvHead): token block x diagonal panel rows (0 =
  // none), heads stacked or not. Per head, 64-row panels are 64 positions.
  for (int64_t tokens : {64, 128, 256}) {
    for (bool stack : {true, false}) {
      for (int64_t panel : {0, 32, 64}) {
        Register(absl::StrCat("BM_OneThread/gqa_h32_g8_t1024_d128_causal/",
                              stack ? "stacked" : "per_head", "_tokens", tokens, "_panel", panel),
                 gqa, {"one_thread", BlasThreading::kItems, stack, 4 * tokens, 0, 1, panel});
      }
    }
  }
  // Block-size sweeps (--benchmark_filter=BM_Sweep): rows per GEMM and key
  // chunk for MHA; token block for GQA, heads stacked or not.
  for (int64_t rows : {64, 128, 256, 512}) {
    for (int64_t chunk : {0, 512}) {
      Register(absl::StrCat("BM_Sweep/mha_h16_t2048_d64_none/rows", rows, "_keys", chunk),
               Problem(16, 16, 2048, 2048, 64, MaskKind::kNone),
               {"sweep", BlasThreading::kItems, true, rows, chunk});
    }
  }
  for (int64_t tokens : {16, 32, 64, 128}) {
    for (bool stack : {true, false}) {
      Register(absl::StrCat("BM_Sweep/gqa_h32_g8_t1024_d128_causal/",
                            stack ? "stacked" : "per_head", "_tokens", tokens),
               gqa, {"sweep", BlasThreading::kItems, stack, 4 * tokens});
    }
  }
  // Decode against a KV cache: one query per head.
  const AttentionProblem decode = Problem(32, 8, 1, 4096, 128, MaskKind::kCausal);
  Register("BM_Blas/decode_h32_g8_k4096_d128/stacked", decode, items);
  Register("BM_Blas/decode_h32_g8_k4096_d128/per_head", decode,
           {"per_head", BlasThreading::kItems, false, 256});
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("openblas_corename", openblas_get_corename());
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  attnkit::RegisterAll();
  attnkit::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

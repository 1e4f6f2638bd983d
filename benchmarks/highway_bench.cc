// Google Benchmark suite for the Highway backend, with the machine's limits
// measured in the same run: peak FMA GFLOP/s (best target, all threads) and
// streaming read bandwidth. Counters: GFLOP/s and % of peak FMA for every
// case; for decode also K/V GB/s and % of read bandwidth.
//   bazel run -c opt //benchmarks:highway_bench
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "backends/highway/highway_backend.h"
#include "benchmark/benchmark.h"
#include "core/problem.h"
#include "harness/grad_data.h"
#include "harness/machine.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

int g_threads = 2;
double g_peak_gflops = 0;
double g_read_gbps = 0;
std::map<std::string, double> g_seconds;  // mean seconds per call, by case

AttentionProblem Problem(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d,
                         bool causal, DType kv_dtype, int64_t page_size = 0) {
  AttentionProblem p = BasicProblem(b, h, g, tq, tk, d);
  p.kv_dtype = kv_dtype;
  if (page_size > 0) {
    p.page_size = page_size;
    p.num_pages = b * p.max_pages();
  }
  if (causal) {
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
  }
  return p;
}

Backend* HighwayBackend() {
  static Backend* backend = MakeHighwayBackend({g_threads}).release();
  return backend;
}

void BM_Attention(benchmark::State& state, const std::string& name, AttentionProblem p,
                  bool memory_bound) {
  auto data = ProblemData::Random(p, 1);
  if (!data.ok()) {
    state.SkipWithError(std::string(data.status().message()).c_str());
    return;
  }
  Backend* backend = HighwayBackend();
  RunInfo info;
  if (auto s = backend->Forward(p, data->args(), &info); !s.ok()) {  // warm-up
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(backend->Forward(p, data->args(), &info).ok());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(state.iterations());
  g_seconds[name] = secs;
  const double gflops = UsefulFlops(p) / secs * 1e-9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["%peak_fma"] = 100.0 * gflops / g_peak_gflops;
  if (p.q_len == 1) {
    // Decode compute per (key, KV head), in thread-nanoseconds: for the
    // in-cache cases, the kernel's cost with no memory stall.
    const double key_heads = static_cast<double>(p.batch * p.num_kv_heads * p.kv_len);
    state.counters["thread_ns/key_head"] = secs * 1e9 * g_threads / key_heads;
  }
  if (memory_bound) {
    const double kv_bytes = static_cast<double>(KvBytesRead(p));
    const double gbps = kv_bytes / secs * 1e-9;
    state.counters["KV_GB/s"] = gbps;
    state.counters["%read_bw"] = 100.0 * gbps / g_read_gbps;
  }
  state.SetLabel(info.kernel);
}

// The backward pass (dQ, dK, dV from the forward's o and lse). Useful FLOPs
// are 2.5x the forward's (five products of the step instead of two).
void BM_Backward(benchmark::State& state, const std::string& name, AttentionProblem p) {
  p.return_lse = true;
  auto data = ProblemData::Random(p, 1);
  auto grads = GradData::Random(p, 2, /*with_dbias=*/false);
  if (!data.ok() || !grads.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  Backend* backend = HighwayBackend();
  RunInfo info;
  for (const absl::Status& s : {backend->Forward(p, data->args()),  // o, lse; then warm-up
                                backend->Backward(p, data->args(), grads->args(), &info)}) {
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(backend->Backward(p, data->args(), grads->args(), &info).ok());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(state.iterations());
  g_seconds[name] = secs;
  const double gflops = 2.5 * UsefulFlops(p) / secs * 1e-9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["%peak_fma"] = 100.0 * gflops / g_peak_gflops;
  state.SetLabel(info.kernel);
}

void RegisterAll() {
  struct Case {
    const char* name;
    AttentionProblem p;
    bool memory_bound;
  };
  const Case cases[] = {
      {"prefill_b1_h16_t2048_d64_causal", Problem(1, 16, 16, 2048, 2048, 64, true, DType::kF32),
       false},
      {"prefill_b1_h32_g8_t1024_d128_causal", Problem(1, 32, 8, 1024, 1024, 128, true, DType::kF32),
       false},
      {"prefill_b1_h16_t512_d64_full", Problem(1, 16, 16, 512, 512, 64, false, DType::kF32), false},
      {"decode_b1_h32_g8_tk4096_d128_f32", Problem(1, 32, 8, 1, 4096, 128, false, DType::kF32),
       true},
      {"decode_b1_h32_g8_tk4096_d128_bf16kv", Problem(1, 32, 8, 1, 4096, 128, false, DType::kBF16),
       true},
      {"decode_b8_h32_g8_tk4096_d128_f32", Problem(8, 32, 8, 1, 4096, 128, false, DType::kF32),
       true},
      {"decode_b8_h32_g8_tk4096_d128_bf16kv", Problem(8, 32, 8, 1, 4096, 128, false, DType::kBF16),
       true},
      {"decode_b8_h32_g8_tk4096_d128_int8kv", Problem(8, 32, 8, 1, 4096, 128, false, DType::kI8),
       true},
      {"decode_b8_h32_g8_tk4096_d128_bf16kv_paged16",
       Problem(8, 32, 8, 1, 4096, 128, false, DType::kBF16, 16), true},
      // Larger pages: the cost of 256-byte rows 2 KiB apart (all KV heads of a
      // token share a page row) apart from the cost of page changes.
      {"decode_b8_h32_g8_tk4096_d128_bf16kv_paged64",
       Problem(8, 32, 8, 1, 4096, 128, false, DType::kBF16, 64), true},
      {"decode_b8_h32_g8_tk4096_d128_bf16kv_paged256",
       Problem(8, 32, 8, 1, 4096, 128, false, DType::kBF16, 256), true},
      // K/V in L2 (1 KV head of 128 keys x 8 sequences: 1 MB in f32): the kernels' compute
      // rate per key, without memory stalls.
      {"decode_l2_b8_h4_g1_tk128_d128_f32", Problem(8, 4, 1, 1, 128, 128, false, DType::kF32),
       false},
      {"decode_l2_b8_h4_g1_tk128_d128_bf16kv", Problem(8, 4, 1, 1, 128, 128, false, DType::kBF16),
       false},
      {"decode_l2_b8_h4_g1_tk128_d128_int8kv", Problem(8, 4, 1, 1, 128, 128, false, DType::kI8),
       false},
      // K/V in L3 (16 items of 1024 keys: 8 MB in bf16): long items, so the
      // per-key compute without DRAM stalls, with little per-item setup.
      {"decode_l3_b2_h32_g8_tk1024_d128_f32", Problem(2, 32, 8, 1, 1024, 128, false, DType::kF32),
       false},
      {"decode_l3_b2_h32_g8_tk1024_d128_bf16kv",
       Problem(2, 32, 8, 1, 1024, 128, false, DType::kBF16), false},
      {"decode_l3_b2_h32_g8_tk1024_d128_int8kv", Problem(2, 32, 8, 1, 1024, 128, false, DType::kI8),
       false},
      // The same in 16-token pages: the compute cost of reading through a
      // block table (rows 2 KiB apart), apart from DRAM's.
      {"decode_l3_b2_h32_g8_tk1024_d128_bf16kv_paged16",
       Problem(2, 32, 8, 1, 1024, 128, false, DType::kBF16, 16), false},
  };
  for (const Case& c : cases) {
    benchmark::RegisterBenchmark(c.name, BM_Attention, std::string(c.name), c.p, c.memory_bound)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5)
        ->UseRealTime();
  }
  // Backward: MHA (one item per head), and MQA (dQ partials over key chunks).
  const std::pair<const char*, AttentionProblem> backward[] = {
      {"backward_b1_h16_t2048_d64_causal", Problem(1, 16, 16, 2048, 2048, 64, true, DType::kF32)},
      {"backward_b1_h16_g1_t2048_d64_causal", Problem(1, 16, 1, 2048, 2048, 64, true, DType::kF32)},
  };
  for (const auto& c : backward) {
    benchmark::RegisterBenchmark(c.first, BM_Backward, std::string(c.first), c.second)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5)
        ->UseRealTime();
  }
}

void PrintRatio(const char* what, const std::string& slow, const std::string& fast) {
  if (g_seconds.count(slow) && g_seconds.count(fast)) {
    std::printf("%s: %.2fx\n", what, g_seconds[slow] / g_seconds[fast]);
  }
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  using namespace attnkit;
  if (const char* env = std::getenv("ATTNKIT_HWY_THREADS")) g_threads = std::atoi(env);
  if (g_threads <= 0) g_threads = static_cast<int>(std::thread::hardware_concurrency());
  benchmark::Initialize(&argc, argv);
  const MachineLimits limits = MeasureLimits(g_threads);  // in this run, not cached
  g_peak_gflops = limits.peak_fma_gflops();
  g_read_gbps = limits.read_gbps();
  std::printf("machine: %d threads, peak FMA %.1f GFLOP/s (%s), read bandwidth %.1f GB/s\n",
              g_threads, g_peak_gflops, limits.best_target().c_str(), g_read_gbps);
  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  PrintRatio("decode B=1 bf16 KV speed-up over f32", "decode_b1_h32_g8_tk4096_d128_f32",
             "decode_b1_h32_g8_tk4096_d128_bf16kv");
  PrintRatio("decode B=8 bf16 KV speed-up over f32", "decode_b8_h32_g8_tk4096_d128_f32",
             "decode_b8_h32_g8_tk4096_d128_bf16kv");
  PrintRatio("decode B=8 int8 KV speed-up over bf16", "decode_b8_h32_g8_tk4096_d128_bf16kv",
             "decode_b8_h32_g8_tk4096_d128_int8kv");
  benchmark::Shutdown();
  return 0;
}

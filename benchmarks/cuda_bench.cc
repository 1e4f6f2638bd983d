// CUDA benchmarks on device-resident data, timed with CUDA events:
//   machine limits: dense bf16 tensor-core rate (cuBLAS GEMM 8192^3) and HBM
//   bandwidth (a copy kernel over 2 x 1 GiB);
//   attention: "cuda" and "cuda-cublas" on bf16 causal prefill (B=4, H=32,
//   T=4096, d=128) and GQA decode (B=8, H=32, Hkv=8, Tq=1, Tk=8192, d=128),
//   with TFLOP/s (useful FLOPs), GB/s (Q, K, V, O bytes) and both as a
//   fraction of the measured limits.
// The backends come from the CUDA plugin, loaded through the registry as
// every other CUDA user loads it: --plugin=PATH, else $ATTNKIT_PLUGIN_PATH,
// else libattnkit_cuda.so in this binary's runfiles. The benchmark's own
// CUDA runtime (events, cuBLAS, the copy kernel) shares the device's primary
// context with the plugin's, so the plugin runs on the benchmark's stream.
// Exits 1 with the reason when no usable GPU or no plugin is present, and
// when any benchmark ends with an error (they are not skips).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "benchmarks/cuda_copy_kernel.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "plugin/registry.h"

namespace attnkit {
namespace {

struct Peaks {
  double tflops = 0;  // dense bf16, fp32 accumulation
  double gbps = 0;    // device memory, read + write
};
Peaks peaks;

// Google Benchmark reports a SkipWithError as a skip and exits 0; here every
// one is an error (an allocation, a kernel, a backend refusing a shape it
// should run), so main exits 1 after the run when any happened.
int errors = 0;
void Fail(benchmark::State& state, const char* message) {
  ++errors;
  std::fprintf(stderr, "cuda_bench: error: %s\n", message);
  state.SkipWithError(message);
}

// Streaming multiprocessors of device 0 (the copy kernel's grid).
int NumSms() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 1;
  return sms > 0 ? sms : 1;
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Milliseconds of `reps` calls of fn, between two events on `stream` (the
// legacy default stream unless given).
float TimeMs(const std::function<void()>& fn, int reps, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int r = 0; r < reps; ++r) fn();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

void BM_CublasBf16Gemm(benchmark::State& state) {
  const int n = 8192;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = size_t{n} * n * 2;
  cublasHandle_t handle = nullptr;
  if (!Check(cudaMalloc(&a, bytes), "cudaMalloc") || !Check(cudaMalloc(&b, bytes), "cudaMalloc") ||
      !Check(cudaMalloc(&c, bytes), "cudaMalloc") ||
      cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    Fail(state, "allocation failed");
    return;
  }
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  auto gemm = [&] {
    status = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                          CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
  };
  TimeMs(gemm, 2);  // warm-up: heuristics, clocks
  for (auto _ : state) state.SetIterationTime(TimeMs(gemm, 5) / 5 / 1e3);
  if (status != CUBLAS_STATUS_SUCCESS) Fail(state, cublasGetStatusString(status));
  const double flops = 2.0 * n * n * double(n);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

void BM_HbmCopy(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  if (!Check(cudaMalloc(&src, bytes), "cudaMalloc") ||
      !Check(cudaMalloc(&dst, bytes), "cudaMalloc")) {
    Fail(state, "allocation failed");
    return;
  }
  cudaMemset(src, 1, bytes);
  const int sms = NumSms();
  auto copy = [&] { bench::LaunchCopy(src, dst, bytes, sms, nullptr); };
  TimeMs(copy, 2);
  for (auto _ : state) state.SetIterationTime(TimeMs(copy, 10) / 10 / 1e3);
  if (!Check(cudaGetLastError(), "copy kernel")) Fail(state, "copy kernel failed");
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(src);
  cudaFree(dst);
}

// The same limits measured once, outside Google Benchmark, to normalise the
// attention numbers.
Peaks MeasurePeaks() {
  Peaks p;
  {
    const int n = 8192;
    const size_t bytes = size_t{n} * n * 2;
    void *a, *b, *c;
    cublasHandle_t h;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
        cudaMalloc(&c, bytes) == cudaSuccess && cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
      cudaMemset(a, 0, bytes);
      cudaMemset(b, 0, bytes);
      const float one = 1.0f, zero = 0.0f;
      auto gemm = [&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF,
                     n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      TimeMs(gemm, 3);
      p.tflops = 2.0 * n * n * double(n) * 10 / (TimeMs(gemm, 10) * 1e-3) / 1e12;
      cublasDestroy(h);
      cudaFree(a);
      cudaFree(b);
      cudaFree(c);
    }
  }
  {
    const size_t bytes = size_t{1} << 30;
    void *src, *dst;
    if (cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&dst, bytes) == cudaSuccess) {
      const int sms = NumSms();
      auto copy = [&] { bench::LaunchCopy(src, dst, bytes, sms, nullptr); };
      TimeMs(copy, 3);
      p.gbps = 2.0 * bytes * 20 / (TimeMs(copy, 20) * 1e-3) / 1e9;
      cudaFree(src);
      cudaFree(dst);
    }
  }
  return p;
}

AttentionProblem Shape(const std::string& name, int64_t batch, int64_t heads, int64_t kv_heads,
                       int64_t q_len, int64_t kv_len) {
  AttentionProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = 128;
  p.model_dim = heads * 128;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.dtype = p.kv_dtype = DType::kBF16;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.scale = 1.0f / std::sqrt(128.0f);
  p.name = name;
  return p;
}

double IoBytes(const AttentionProblem& p) {
  const double e = 2;  // bf16
  return e * p.head_dim *
         (2.0 * p.batch * p.num_heads * p.q_len + 2.0 * p.batch * p.num_kv_heads * p.kv_len);
}

void BM_Attention(benchmark::State& state, Backend* backend, AttentionProblem p) {
  const absl::Status supported = backend->Supports(p);
  if (!supported.ok()) {
    Fail(state, std::string(supported.message()).c_str());
    return;
  }
  auto host = ProblemData::Random(p, 1);
  if (!host.ok()) {
    Fail(state, std::string(host.status().message()).c_str());
    return;
  }
  auto placed = PlacedProblem::Place(backend, *host);
  if (!placed.ok()) {
    Fail(state, std::string(placed.status().message()).c_str());
    return;
  }
  // The backend runs on our stream, so the events bracket its kernels.
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  absl::Status status = backend->SetStream(stream);
  if (!status.ok()) {
    Fail(state, std::string(status.message()).c_str());
    return;
  }
  RunInfo info;
  status = placed->Forward(p, &info);  // warm-up
  if (status.ok()) status = backend->Synchronize();
  if (!status.ok()) {
    Fail(state, std::string(status.message()).c_str());
    return;
  }
  for (auto _ : state) {
    const float ms = TimeMs([&] { status.Update(placed->Forward(p, nullptr)); }, 1, stream);
    state.SetIterationTime(ms / 1e3);
  }
  status.Update(backend->Synchronize());
  if (!status.ok()) Fail(state, std::string(status.message()).c_str());
  const double flops = UsefulFlops(p), bytes = IoBytes(p);
  using C = benchmark::Counter;
  state.counters["TFLOP/s"] = C(flops / 1e12, C::kIsIterationInvariantRate);
  state.counters["GB/s"] = C(bytes / 1e9, C::kIsIterationInvariantRate);
  if (peaks.tflops > 0) {
    state.counters["frac_peak_flops"] =
        C(flops / 1e12 / peaks.tflops, C::kIsIterationInvariantRate);
  }
  if (peaks.gbps > 0) {
    state.counters["frac_peak_bw"] = C(bytes / 1e9 / peaks.gbps, C::kIsIterationInvariantRate);
  }
  state.SetLabel(info.kernel);
}

}  // namespace
}  // namespace attnkit

// The CUDA plugin's path: --plugin=PATH (removed from argv), else
// $ATTNKIT_PLUGIN_PATH, else the copy in this binary's runfiles.
std::string PluginPath(int* argc, char** argv) {
  std::string path;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--plugin=", 0) == 0) {
      path = a.substr(9);
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  if (!path.empty()) return path;
  if (const char* env = std::getenv("ATTNKIT_PLUGIN_PATH")) return env;
  return std::string(argv[0]) + ".runfiles/attnkit/backends/cuda/libattnkit_cuda.so";
}

int main(int argc, char** argv) {
  using namespace attnkit;
  const std::string plugin = PluginPath(&argc, argv);
  benchmark::Initialize(&argc, argv);
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cuda_bench: no usable GPU: %s\n",
                 probe != cudaSuccess ? cudaGetErrorString(probe) : "no CUDA device");
    return 1;
  }
  cudaDeviceProp prop;
  if (!Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  static BackendRegistry registry;
  // Every ':'-separated path (ATTNKIT_PLUGIN_PATH may list several).
  registry.LoadPluginList(plugin);
  std::vector<Backend*> backends;
  for (const char* name : {"cuda", "cuda-cublas"}) {
    absl::StatusOr<Backend*> b = registry.Find(name);
    if (!b.ok()) {
      std::fprintf(stderr, "cuda_bench: backend %s from %s: %s\n", name, plugin.c_str(),
                   std::string(b.status().message()).c_str());
      for (const PluginFailure& f : registry.plugin_failures()) {
        std::fprintf(stderr, "cuda_bench: plugin %s: %s\n", f.path.c_str(),
                     std::string(f.status.message()).c_str());
      }
      return 1;
    }
    backends.push_back(*b);
  }
  peaks = MeasurePeaks();
  benchmark::AddCustomContext("gpu", prop.name);
  benchmark::AddCustomContext("peak_bf16_tflops", absl::StrFormat("%.1f", peaks.tflops));
  benchmark::AddCustomContext("peak_hbm_gbps", absl::StrFormat("%.0f", peaks.gbps));
  std::fprintf(stderr, "cuda_bench: %s, measured %.1f TFLOP/s dense bf16, %.0f GB/s copy\n",
               prop.name, peaks.tflops, peaks.gbps);

  benchmark::RegisterBenchmark("peak/cublas_bf16_gemm_8192", BM_CublasBf16Gemm)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("peak/hbm_copy_1GiB", BM_HbmCopy)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);

  const AttentionProblem shapes[] = {
      Shape("prefill_b4_h32_t4096_d128_causal", 4, 32, 32, 4096, 4096),
      Shape("decode_b8_h32_g8_tk8192_d128", 8, 32, 8, 1, 8192),
  };
  for (Backend* backend : backends) {
    for (const AttentionProblem& p : shapes) {
      benchmark::RegisterBenchmark(
          absl::StrFormat("attention/%s/%s", backend->Name(), p.name).c_str(), BM_Attention,
          backend, p)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (errors > 0) {
    std::fprintf(stderr, "cuda_bench: FAIL: %d benchmark(s) ended with an error\n", errors);
    return 1;
  }
  return 0;
}

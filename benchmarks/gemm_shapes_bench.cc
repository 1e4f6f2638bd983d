// What OpenBLAS sgemm alone gives at the shapes the blas backend issues for
// B=1, H=32, Hkv=8, T=1024, d=128, causal (issue 4), single-threaded:
//   bazel run -c opt //benchmarks:gemm_shapes_bench
// BM_Shape: one S = Q K^T [m, n, k=128] or O = P V [m, 128, k] call.
// BM_KvHead: the exact GEMM sequence of one kv head (4 query heads) with the
// softmax left out, stacked (rows = 4 x tokens) or per head (rows = tokens):
// the upper bound on what stacking can buy through GEMM shapes alone.
#include <cblas.h>

#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"

namespace {

constexpr int kD = 128;
constexpr int kT = 1024;
constexpr int kGroup = 4;

// S [m, n] = Q [m, d] . K [n, d]^T, as the backend calls it (beta 0).
void Scores(int m, int n, const float* q, const float* k, float* s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kD, 0.088f, q, kD, k, kD, 0.0f, s, n);
}

// O [m, d] (+)= P [m, n] . V [n, d].
void Values(int m, int n, const float* p, const float* v, float beta, float* o) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, kD, n, 1.0f, p, n, v, kD, beta, o, kD);
}

struct Buffers {
  std::vector<float> q, k, v, s, o;
  Buffers()
      : q(size_t(kGroup) * kT * kD, 0.01f),
        k(size_t(kT) * kD, 0.02f),
        v(size_t(kT) * kD, 0.03f),
        s(size_t(kGroup) * kT * kT, 0.001f),
        o(size_t(kGroup) * kT * kD) {}
};

// Args: 0 = S, 1 = PV; m; n (keys).
void BM_Shape(benchmark::State& state) {
  openblas_set_num_threads(1);
  const bool pv = state.range(0) == 1;
  const int m = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  Buffers b;
  for (auto _ : state) {
    if (pv) {
      Values(m, n, b.s.data(), b.v.data(), 0.0f, b.o.data());
    } else {
      Scores(m, n, b.q.data(), b.k.data(), b.s.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * kD * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(openblas_get_corename());
}

// Args: stacked (0/1), token block. Causal, Tq = Tk: block i0 sees keys
// [0, i0 + tokens). GFLOP/s counts issued FLOPs (masked ones included).
void BM_KvHead(benchmark::State& state) {
  openblas_set_num_threads(1);
  const bool stacked = state.range(0) == 1;
  const int tokens = static_cast<int>(state.range(1));
  const int heads = stacked ? kGroup : 1;
  const int rows = heads * tokens;
  Buffers b;
  double flops = 0;
  for (int i0 = 0; i0 < kT; i0 += tokens) {
    flops += kGroup * 4.0 * tokens * (i0 + tokens) * kD;
  }
  for (auto _ : state) {
    for (int i0 = 0; i0 < kT; i0 += tokens) {
      const int kn = i0 + tokens;
      for (int h = 0; h < kGroup; h += heads) {
        Scores(rows, kn, b.q.data() + size_t(h) * kT * kD, b.k.data(), b.s.data());
        Values(rows, kn, b.s.data(), b.v.data(), 0.0f, b.o.data());
      }
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void Register() {
  for (int pv : {0, 1}) {
    for (int m : {16, 32, 64, 128, 256}) {
      for (int n : {64, 256, 512, 1024}) {
        benchmark::RegisterBenchmark(pv ? "BM_Shape/PV" : "BM_Shape/S", BM_Shape)
            ->Args({pv, m, n})
            ->ArgNames({"pv", "m", "n"})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (int tokens : {16, 32, 64, 128, 256}) {
    for (int stacked : {1, 0}) {
      benchmark::RegisterBenchmark("BM_KvHead", BM_KvHead)
          ->Args({stacked, tokens})
          ->ArgNames({"stacked", "tokens"})
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("openblas_corename", openblas_get_corename());
  Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

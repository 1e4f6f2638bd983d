// The oneDNN backend's two choices, measured on this machine:
//  1. what the first call costs: a fresh backend's first Forward (primitive
//     creation for every block shape) against its warm median, with the
//     primitives created and the seconds spent creating them;
//  2. threading: blocks over the backend's threads with 1-thread oneDNN
//     GEMMs (kItems) against items in sequence with oneDNN's OpenMP threads
//     in each GEMM (kBlas), alternated round by round (the host is shared).
//  3. with `sweep`: the block plan (stacked rows per GEMM x keys per S
//     block) on the prefill problems in f32 and in bf16 under FAST, each
//     plan alternated round by round. Zen 5 (AVX512_BF16), 2 threads: the
//     default plan (256 rows, every key in one S block) was best or within
//     noise of best in all four cells, so S leaving L2 is not what keeps
//     bf16 prefill from its target (oneDNN's bf16 GEMMs alone ran at 440-465
//     GFLOP/s per thread at these shapes, 90 % of the bf16 peak).
// Usage: onednn_bench [threads=2] [rounds=5] [sweep]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/blas/blas_backend.h"
#include "backends/onednn/onednn_engine.h"
#include "core/backend.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

AttentionProblem Problem(const char* name, int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk,
                         int64_t d, MaskKind mask) {
  AttentionProblem p = BasicProblem(b, h, g, tq, tk, d);
  p.name = name;
  p.mask = mask;
  p.alignment = Alignment::kBottomRight;
  return p;
}

double Seconds(BlasBackend& backend, const AttentionProblem& p, const AttentionArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = backend.Forward(p, args);
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", p.name.c_str(), std::string(s.message()).c_str());
    std::exit(1);
  }
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::shared_ptr<onednn::OneDnnEngine> NewEngine() {
  auto engine = onednn::OneDnnEngine::Create();
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    std::exit(1);
  }
  return std::shared_ptr<onednn::OneDnnEngine>(std::move(*engine));
}

// The block plan's two sizes against each other: S is rows x keys floats per
// worker, and the row operations pass over it several times, so whether it
// stays in L2 matters as much as the GEMM shapes.
int Sweep(int threads, int rounds) {
  struct Shape {
    const char* name;
    int64_t h, g, t, d;
  };
  const Shape shapes[] = {{"h16_t2048_d64_causal", 16, 16, 2048, 64},
                          {"gqa_h32_g8_t1024_d128_causal", 32, 8, 1024, 128}};
  const int64_t rows[] = {64, 128, 256};
  const int64_t chunks[] = {128, 256, 512, 0};
  std::printf("%-34s %-5s %6s %6s %10s\n", "problem", "type", "rows", "keys", "median ms");
  for (const Shape& sh : shapes) {
    for (int type = 0; type < 2; ++type) {
      AttentionProblem p = Problem(sh.name, 1, sh.h, sh.g, sh.t, sh.t, sh.d, MaskKind::kCausal);
      if (type == 1) {
        p.dtype = p.kv_dtype = DType::kBF16;
        p.compute = ComputeMode::kFast;
      }
      auto data = ProblemData::Random(p, 1);
      if (!data.ok()) return 1;
      const AttentionArgs args = data->args();
      std::vector<std::unique_ptr<BlasBackend>> backends;
      for (int64_t r : rows) {
        for (int64_t c : chunks) {
          BlasOptions o;
          o.num_threads = threads;
          o.engine = NewEngine();
          o.target_rows = r;
          o.max_key_chunk = c;
          backends.push_back(std::make_unique<BlasBackend>(o));
          Seconds(*backends.back(), p, args);  // warm
        }
      }
      std::vector<std::vector<double>> t(backends.size());
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < backends.size(); ++i) t[i].push_back(Seconds(*backends[i], p, args));
      }
      for (size_t i = 0; i < backends.size(); ++i) {
        std::printf("%-34s %-5s %6lld %6lld %10.3f\n", sh.name, type ? "bf16" : "f32",
                    static_cast<long long>(rows[i / 4]), static_cast<long long>(chunks[i % 4]),
                    Median(t[i]) * 1e3);
      }
    }
  }
  return 0;
}

int Main(int threads, int rounds) {
  const std::vector<AttentionProblem> problems = {
      Problem("mha_h16_t2048_d64_causal", 1, 16, 16, 2048, 2048, 64, MaskKind::kCausal),
      Problem("gqa_h32_g8_t1024_d128_causal", 1, 32, 8, 1024, 1024, 128, MaskKind::kCausal),
      Problem("cross_h16_q256_k2048_d64", 1, 16, 16, 256, 2048, 64, MaskKind::kNone),
      Problem("decode_b8_h32_g8_k4096_d128", 8, 32, 8, 1, 4096, 128, MaskKind::kNone),
      Problem("decode_b1_h32_g8_k4096_d128", 1, 32, 8, 1, 4096, 128, MaskKind::kNone),
  };
  std::printf("oneDNN %s, %s; %d threads, %d rounds\n\n", onednn::OneDnnEngine::Version().c_str(),
              NewEngine()->Isa().c_str(), threads, rounds);
  std::printf("%-30s %12s %12s %10s %12s\n", "first call", "first ms", "warm ms", "created",
              "create ms");
  for (const AttentionProblem& p : problems) {
    auto data = ProblemData::Random(p, 1);
    if (!data.ok()) return 1;
    const AttentionArgs args = data->args();
    std::shared_ptr<onednn::OneDnnEngine> engine = NewEngine();
    const onednn::CacheStats before = engine->Stats();
    BlasOptions o;
    o.num_threads = threads;
    o.engine = engine;
    BlasBackend backend(o);
    const double first = Seconds(backend, p, args);
    const onednn::CacheStats after = engine->Stats();
    std::vector<double> warm;
    for (int r = 0; r < rounds; ++r) warm.push_back(Seconds(backend, p, args));
    std::printf("%-30s %12.3f %12.3f %10lld %12.3f\n", p.name.c_str(), first * 1e3,
                Median(warm) * 1e3, static_cast<long long>(after.misses - before.misses),
                (after.create_seconds - before.create_seconds) * 1e3);
  }
  std::printf("\n%-30s %12s %12s %10s\n", "threading (median ms)", "items", "onednn-omp",
              "omp/items");
  for (const AttentionProblem& p : problems) {
    auto data = ProblemData::Random(p, 1);
    if (!data.ok()) return 1;
    const AttentionArgs args = data->args();
    std::unique_ptr<BlasBackend> backends[2];
    const BlasThreading modes[2] = {BlasThreading::kItems, BlasThreading::kBlas};
    for (int m = 0; m < 2; ++m) {
      BlasOptions o;
      o.num_threads = threads;
      o.threading = modes[m];
      o.engine = NewEngine();
      backends[m] = std::make_unique<BlasBackend>(o);
      Seconds(*backends[m], p, args);  // warm: primitives and workspace
    }
    std::vector<double> t[2];
    for (int r = 0; r < rounds; ++r) {
      for (int m = 0; m < 2; ++m) t[m].push_back(Seconds(*backends[(m + r) % 2], p, args));
    }
    // t[m] holds mode (m + r) % 2 at round r: regroup by mode.
    std::vector<double> by_mode[2];
    for (int r = 0; r < rounds; ++r) {
      for (int m = 0; m < 2; ++m) by_mode[(m + r) % 2].push_back(t[m][r]);
    }
    const double items = Median(by_mode[0]), omp = Median(by_mode[1]);
    std::printf("%-30s %12.3f %12.3f %10.2f\n", p.name.c_str(), items * 1e3, omp * 1e3,
                omp / items);
  }
  return 0;
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (argc > 3 && std::string(argv[3]) == "sweep") {
    return attnkit::Sweep(std::max(1, threads), std::max(1, rounds));
  }
  return attnkit::Main(std::max(1, threads), std::max(1, rounds));
}

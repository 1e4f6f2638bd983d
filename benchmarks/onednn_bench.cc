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
//  4. with `decode-gemms`: the int8 FAST decode's GEMMs alone (DecodeGemms).
//     Zen 5 (oneDNN avx512_core_bf16), one thread: 3.7-4.1 ms a pass (Q.K
//     1.5-1.7, P.V 2.0-2.3; at most 0.3 of it the calls themselves, 1.6 us
//     each), where highway's whole int8 FAST decode of that shape took
//     2.63-2.67 ms (`attnkit compare`, problem 19, run alternately); two
//     threads 1.87-2.15 ms against 1.39-1.75 on a noisy host. So an int8
//     decode built from these GEMMs cannot match highway's here.
//  5. with `prefill-gemms`: the FAST bf16 prefills' time and the part of it
//     spent in oneDNN's GEMMs (PrefillGemms).
// Usage: onednn_bench [threads=2] [rounds=5] [sweep | decode-gemms | prefill-gemms]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/blas/blas_backend.h"
#include "backends/onednn/onednn_engine.h"
#include "core/backend.h"
#include "harness/problem_data.h"
#include "platform/median.h"
#include "platform/thread_pool.h"

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

std::shared_ptr<onednn::OneDnnEngine> NewEngine() {
  auto engine = onednn::OneDnnEngine::Create();
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    std::exit(1);
  }
  return std::shared_ptr<onednn::OneDnnEngine>(std::move(*engine));
}

// The standard suite's two causal prefill shapes (02/17/18: B1 H16 T2048
// d64; 03/15/16: GQA B1 H32/8 T1024 d128), which Sweep and PrefillGemms run.
struct PrefillShape {
  const char* name;
  int64_t heads, kv_heads, tokens, d;

  AttentionProblem Causal() const {
    return Problem(name, 1, heads, kv_heads, tokens, tokens, d, MaskKind::kCausal);
  }
};
constexpr PrefillShape kPrefillShapes[] = {{"h16_t2048_d64_causal", 16, 16, 2048, 64},
                                           {"gqa_h32_g8_t1024_d128_causal", 32, 8, 1024, 128}};

// The block plan's two sizes against each other: S is rows x keys floats per
// worker, and the row operations pass over it several times, so whether it
// stays in L2 matters as much as the GEMM shapes.
int Sweep(int threads, int rounds) {
  const int64_t rows[] = {64, 128, 256};
  const int64_t chunks[] = {128, 256, 512, 0};
  std::printf("%-34s %-5s %6s %6s %10s\n", "problem", "type", "rows", "keys", "median ms");
  for (const PrefillShape& sh : kPrefillShapes) {
    for (int type = 0; type < 2; ++type) {
      AttentionProblem p = sh.Causal();
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

// The integer GEMMs of the int8 FAST decode B8 H32/8 Tk4096 d128 alone, as
// the backend issues them (rows 4x1, keys <= 4096, attention_block.cc): per
// (batch, KV head) one Int8DotTransB S [4, 4096] = Q [4, 128] . K^T and
// two U8S8DotBatch of 32 blocks of 64 keys, O_x [4, 128] = P_x [4, 64] .
// V_x. No softmax, quantization or accumulation: the floor any decode
// built from these GEMMs has, to set against the whole decode's time
// (`attnkit compare`, problem 19). K and V (67 MB) exceed the last-level
// cache, so each pass reads them from memory as the decode does.
int DecodeGemms(int threads, int rounds) {
  constexpr int64_t kItems = 8 * 8, kKeys = 4096, kD = 128, kRows = 4, kBlock = 64;
  constexpr int64_t kBatch = 32;  // blocks per U8S8DotBatch (block_plan.cc U8SumInts)
  std::shared_ptr<onednn::OneDnnEngine> engine = NewEngine();
  if (!engine->HasInt8Dot() || !engine->HasU8S8Dot()) {
    std::printf("oneDNN %s has no exact int8 GEMMs here: %s %s\n", engine->Isa().c_str(),
                engine->Int8Note().c_str(), engine->U8Note().c_str());
    return 0;
  }
  std::vector<int8_t> k(kItems * kKeys * kD, 3), v(kItems * kKeys * kD, -5), q(kRows * kD, 7);
  std::vector<uint8_t> pw(kKeys / kBlock * kRows * kBlock, 200);
  struct Scratch {
    std::vector<int32_t> s = std::vector<int32_t>(kRows * kKeys);
    std::vector<int32_t> sums = std::vector<int32_t>(kBatch * kRows * kD);
  };
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  // parts: 1 Q.K, 2 P.V, 3 both.
  auto item = [&](int64_t i, Scratch& w, int parts) {
    const int8_t* ki = k.data() + i * kKeys * kD;
    const int8_t* vi = v.data() + i * kKeys * kD;
    if (parts & 1) engine->Int8DotTransB(kRows, kKeys, kD, q.data(), kD, ki, kD, w.s.data(), kKeys);
    for (int64_t x0 = 0; (parts & 2) && x0 < kKeys / kBlock; x0 += kBatch) {
      engine->U8S8DotBatch(kBatch, kRows, kD, kBlock, pw.data() + x0 * kRows * kBlock,
                           vi + x0 * kBlock * kD, kD, kBlock * kD, w.sums.data());
    }
  };
  ThreadPool pool(threads);  // as the backend's: workers live across passes
  auto pass = [&](int parts) {
    const auto start = std::chrono::steady_clock::now();
    pool.Run(kItems,
             [&](int64_t i, int worker) { item(i, scratch[static_cast<size_t>(worker)], parts); });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  pass(3);  // primitives created
  std::vector<double> t[4];
  for (int r = 0; r < rounds; ++r) {
    for (int parts = 1; parts <= 3; ++parts) t[parts].push_back(pass(parts));
  }
  // The cost of a call itself: a small Int8DotTransB (4 x 64 x 128, operands
  // in L1) many times on this thread, an upper bound on the part of each
  // call above that is not arithmetic or memory.
  std::vector<double> small;
  for (int r = 0; r < rounds; ++r) {
    constexpr int kCalls = 2000;
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < kCalls; ++c) {
      engine->Int8DotTransB(kRows, kBlock, kD, q.data(), kD, k.data(), kD, scratch[0].s.data(),
                            kBlock);
    }
    small.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kCalls);
  }
  std::printf(
      "oneDNN %s, %d threads, the int8 FAST decode's GEMMs alone (B8 H32/8 Tk4096 d128; per "
      "(batch, KV head) one Int8DotTransB [4 x 4096 x 128] and %lld U8S8DotBatch of %lld x "
      "[4 x 128 x 64]), median ms of %d passes:\n"
      "  Q.K %.3f (K at %.1f GB/s), P.V %.3f (V at %.1f GB/s), both %.3f (%.1f GB/s)\n",
      engine->Isa().c_str(), threads, static_cast<long long>(kKeys / kBlock / kBatch),
      static_cast<long long>(kBatch), rounds, Median(t[1]) * 1e3, k.size() / Median(t[1]) * 1e-9,
      Median(t[2]) * 1e3, v.size() / Median(t[2]) * 1e-9, Median(t[3]) * 1e3,
      2.0 * k.size() / Median(t[3]) * 1e-9);
  std::printf(
      "  one Int8DotTransB [4 x 64 x 128] in L1: %.2f us a call (%lld calls a pass above)\n",
      Median(small) * 1e6, static_cast<long long>(kItems * (1 + kKeys / kBlock / kBatch)));
  return 0;
}

// A oneDNN engine that also sums the seconds its 16-bit and f32 GEMMs take
// (over all threads) and the FLOPs they compute: the backend's own GEMMs,
// in its own plan, timed inside a whole Forward. GEMM ms below (the sum over
// threads / threads) assumes one-thread GEMMs, which the backend's threading
// picks for these prefills.
class TimedEngine : public blas::GemmEngine {
 public:
  explicit TimedEngine(std::shared_ptr<onednn::OneDnnEngine> inner) : inner_(std::move(inner)) {}
  std::string BackendName() const override { return inner_->BackendName(); }
  std::string Library() const override { return inner_->Library(); }
  std::string KernelTag() const override { return inner_->KernelTag(); }
  void SetGemmThreads(int n) override { inner_->SetGemmThreads(n); }
  int GemmThreads() const override { return inner_->GemmThreads(); }
  std::string Remarks() const override { return inner_->Remarks(); }
  // Only the f32 and 16-bit GEMMs are passed through (and timed): the
  // integer ones are declared absent, so no backend calls their empty bodies.
  bool HasInt8Dot() const override { return false; }
  bool HasU8S8Dot() const override { return false; }
  bool HasGemm16(DType type) const override { return inner_->HasGemm16(type); }
  absl::Status TakeError() override { return inner_->TakeError(); }
  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) override {
    Timed(m, n, k,
          [&] { inner_->Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }
  void Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc) override {
    Timed(m, n, k, [&] {
      inner_->Gemm16(type, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  }
  // Seconds and FLOPs since the last call, and resets them.
  std::pair<double, double> Take() {
    return {ns_.exchange(0) * 1e-9, static_cast<double>(flops_.exchange(0))};
  }

 private:
  template <class Fn>
  void Timed(int64_t m, int64_t n, int64_t k, const Fn& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start)
               .count();
    flops_ += 2 * m * n * k;
  }
  std::shared_ptr<onednn::OneDnnEngine> inner_;
  std::atomic<int64_t> ns_{0}, flops_{0};
};

// The FAST all-bf16 causal prefills of the standard suite (16: GQA B1 H32/8
// T1024 d128; 18: B1 H16 T2048 d64) on the oneDNN backend: each Forward's
// time, and the part of it its threads spent inside oneDNN's GEMMs (their
// seconds summed over the threads, divided by the thread count) with the
// GEMMs' GFLOP/s. Issue 32 asks this backend's FAST prefill for 1.8x the
// best f32 backend (highway, `attnkit compare` 03 and 02): the GEMMs alone,
// in the backend's plan, are a floor under the backend's time.
int PrefillGemms(int threads, int rounds) {
  auto engine = std::make_shared<TimedEngine>(NewEngine());
  BlasOptions o;
  o.num_threads = threads;
  o.engine = engine;
  BlasBackend backend(o);
  std::printf("oneDNN %s, %d threads, FAST all-bf16 causal prefills, median of %d calls:\n",
              NewEngine()->Isa().c_str(), threads, rounds);
  std::printf("  %-28s %10s %10s %12s %10s\n", "problem", "call ms", "GEMM ms", "GEMM GFLOP/s",
              "GEMM GFLOP");
  for (const PrefillShape& sh : kPrefillShapes) {
    AttentionProblem p = sh.Causal();
    p.dtype = p.kv_dtype = DType::kBF16;
    p.compute = ComputeMode::kFast;
    auto data = ProblemData::Random(p, 1);
    if (!data.ok()) return 1;
    const AttentionArgs args = data->args();
    Seconds(backend, p, args);  // primitives created
    engine->Take();
    std::vector<double> call, gemm, rate;
    double gemm_flops = 0;  // the same every call
    for (int r = 0; r < rounds; ++r) {
      call.push_back(Seconds(backend, p, args));
      const auto [seconds, flops] = engine->Take();
      gemm.push_back(seconds / threads);
      rate.push_back(flops / seconds * threads);
      gemm_flops = flops;
    }
    std::printf("  %-28s %10.3f %10.3f %12.1f %10.2f\n", sh.name, Median(call) * 1e3,
                Median(gemm) * 1e3, Median(rate) * 1e-9, gemm_flops * 1e-9);
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
  if (argc > 3 && std::string(argv[3]) == "decode-gemms") {
    return attnkit::DecodeGemms(std::max(1, threads), std::max(1, rounds));
  }
  if (argc > 3 && std::string(argv[3]) == "prefill-gemms") {
    return attnkit::PrefillGemms(std::max(1, threads), std::max(1, rounds));
  }
  if (argc > 3 && std::string(argv[3]) == "sweep") {
    return attnkit::Sweep(std::max(1, threads), std::max(1, rounds));
  }
  return attnkit::Main(std::max(1, threads), std::max(1, rounds));
}

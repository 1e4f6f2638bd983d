// The floor of a decode on this CPU: what streaming the standard suite's
// B8 H32/8 Tk4096 d128 K/V through the fewest instructions any kernel of
// each kind must issue costs, against a read loop over the same bytes,
// timed in one run (issue 31's int8 target, issue 36's fp8 one).
//
// For each (batch, KV head) item and each 64-key tile, a "floor" kernel
// loads every byte of the tile's K rows and then of its V rows and, per
// 64 bytes, issues the arithmetic a group of 4 query rows needs for them,
// with no softmax, scaling, reductions or stores:
//   read:   one vpaddd (the read loop: what memory alone allows);
//   int8:   4 vpdpbusd (AVX512_VNNI; 64 products each: 4 rows x 64 values);
//   fp8:    per 16 codes a sign-extend, a shift and an AND (the cheapest
//           exact widening of E4M3 to f32, microkernels-inl.h's
//           Fp8Folded) and 4 FMAs: 28 instructions;
//   bf16:   per 32 values a shift and an AND (both halves of each 32-bit
//           lane to f32) and 8 FMAs: 10 instructions.
// Each kind runs four ways:
//   streamed: the problem's K and V (67 MB of int8 or fp8, 134 MB of
//             bf16: in this machine's LLC where it holds them, as in
//             `attnkit compare`'s repeated calls), rows read once a call;
//   +prefetch L1: the same with each line prefetched into L1 8 KiB ahead
//             (the distance of attnkit's decode kernels, tiling.h
//             kAheadBytes; they ask for L2, and their tile's V rows for
//             L1);
//   +prefetch L2: the same into L2 (prefetcht1). A later stop (2026-12-07,
//             the Xeon below, paired, one run at each thread count)
//             found it the better floor: int8 79 % of the loop at one
//             thread and 98 % at two against L1's 72 and 85 %, bf16 77
//             and 81 % against 62 and 71 %, fp8 61 and 60 % against 52
//             and 62 %; the real int8 kernels, which prefetch as the
//             decode does in both columns, 66-71 %. (Earlier tables
//             below ran the L1 way as "+prefetch". Since a later stop,
//             at two threads their P.V asks for the V rows ahead into
//             L2 and their Q.K no longer does: sdpa-inl.h's
//             pv_v_ahead_l2.)
//   in L1:    the same instructions on one 64-key tile per worker, read
//             again for every tile: the arithmetic alone (c).
// A decode whose arithmetic overlapped its memory traffic would take
// about max(c, read); one whose times add, about c + read. The streamed
// floor says which this CPU does; with the decode's own times from
// `attnkit compare` (run beside it) it bounds the ratios the issues ask
// for. int8's real kernels (x86_dot's VnniQDotK4 and WeightedQuadsV4,
// prefetching as the decode has them in both +prefetch ways) run the
// same four ways.
// Xeon with AMX (AVX-512 VNNI), 2 threads, two rounds, each beside one
// `attnkit compare --backends=highway --threads=2` of 09, 19 and 24, ms:
//               streamed   +prefetch  in L1 (c)   `attnkit compare`
//   read        1.30-1.42  1.21-1.31  0.18
//   int8 floor  1.58-1.81  1.31-1.36  0.50-0.54   19 (int8 FAST): 3.24-3.49
//   int8 kernels 2.32-2.63 2.14-2.28  1.31-1.34   (P.V then took the next
//                             tile's V rows; on Intel it now takes its K rows)
//   fp8 floor   3.32-3.86  2.43-2.48  2.39-2.49   24 (fp8 FAST):  4.79-4.87
//   bf16 read   4.38-4.48  4.35-4.61  0.31-0.35
//   bf16 floor  8.25-8.27  5.43-5.65  1.86-1.89   09 (bf16):      6.74-6.81
// With prefetches the floors' arithmetic hides under their memory traffic
// (int8 at 93-97 % of the read loop; fp8 takes its c), so neither issue's
// target is out of this CPU's reach. 19's 80 % of the read loop (about
// 1.5-1.6 ms here) needs Q.K and P.V kernels about twice as cheap as
// VnniQDotK4 and WeightedQuadsV4, which alone take 2.14-2.28 ms streamed.
// 24's 1.6x of 09 (4.2 ms) needs an fp8 decode within 1.7x of its floor;
// it runs at 1.95x.
// The same under `paired` (below; the issues' judge), same CPU, AVX3_DL,
// two runs, % of the paired read loop (47-50 GB/s at 2 threads, 21 at 1;
// bf16's 134 MB 34-35 and 17.5):
//               2 threads +prefetch   in L1 (c, ms)  1 thread +prefetch
//   read        86-91 %               0.16-0.17   83-86 %
//   int8 floor  82-85 %               0.42-0.48   79 %
//   int8 kernels 67-69 %              1.01-1.17   73 %
//   fp8 floor   56 %                  2.12-2.28   57 %
//   bf16 floor  70-73 %               1.61-1.67   69 %
// The decodes themselves, `phase_bench ... paired` beside it: 19 (int8
// FAST) 60-62 %, 24 (fp8 FAST) 36-37 % (3.75 ms); `attnkit compare` 09
// (bf16) 5.20 ms. So 19's 80 % needs arithmetic near the int8 floor's
// (the kernels alone reach 67-73 %), and 24's 1.6x of 09 (3.25 ms) an fp8
// decode within 1.3x of its floor's 2.4-2.6 ms (it runs at 1.5x).
// paired: each streamed pass comes after one pass of `attnkit compare`'s
// paired read loop over as many bytes (harness/paired_read.h), so it meets
// K and V where compare's calls do (and a model's decode, after the other
// layers' traffic), and the percentages are of that loop's rate.
//   bazel run -c opt //benchmarks:decode_floor_bench -- [threads=2] [rounds=7] [paired]
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use (as in x86_vnni_dot.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/highway/x86_dot.h"
#include "harness/paired_read.h"
#include "platform/median.h"
#include "platform/thread_pool.h"

namespace attnkit {
namespace {

// Problems 09, 19, 23 and 24: B8, 8 KV heads, 4096 keys, d 128, groups of 4.
constexpr int64_t kItems = 8 * 8, kKeys = 4096, kD = 128, kTileKeys = 64;
constexpr size_t kAhead = 8 << 10;  // bytes, as tiling.h's kAheadBytes

// Aligned, first-touched once (pages cost ~11 us each the first time).
struct Buffer {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : data(static_cast<uint8_t*>(std::aligned_alloc(64, n))), bytes(n) {}
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// ---- Floor kernels: `bytes` (a multiple of 256) from p, prefetching each
// line `ahead` bytes on when ahead > 0 (into L1, or with kL2 into L2); the
// accumulators go to *sink so nothing is dropped. ----

// The line at p into L1 (prefetcht0) or L2 (prefetcht1).
template <bool kL2>
inline void PrefetchLine(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

#define ATTNKIT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

template <bool kL2>
ATTNKIT_AVX512 void ReadFloor(const uint8_t* p, size_t bytes, size_t ahead, float* sink) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes; i += 256) {
    if (ahead) {
      for (size_t l = 0; l < 256; l += 64) PrefetchLine<kL2>(p + i + ahead + l);
    }
    a0 = _mm512_add_epi32(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi32(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi32(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi32(a3, _mm512_load_si512(p + i + 192));
  }
  const __m512i s = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
  *sink += static_cast<float>(_mm512_reduce_add_epi32(s));
}

// The accumulators are named variables, each step written out: GCC 12 at
// -O2 kept an indexed array of them on the stack.

// 4 rows x 64 values a vpdpbusd: 4 per 64 bytes, 8 chains.
template <bool kL2>
ATTNKIT_AVX512 void Int8Floor(const uint8_t* p, size_t bytes, size_t ahead, float* sink) {
  const __m512i q0 = _mm512_set1_epi32(0x01020304), q1 = _mm512_set1_epi32(0x05060708);
  const __m512i q2 = _mm512_set1_epi32(0x090a0b0c), q3 = _mm512_set1_epi32(0x0d0e0f10);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0;
  for (size_t i = 0; i < bytes; i += 128) {
    if (ahead) {
      PrefetchLine<kL2>(p + i + ahead);
      PrefetchLine<kL2>(p + i + ahead + 64);
    }
    const __m512i x = _mm512_load_si512(p + i), y = _mm512_load_si512(p + i + 64);
    a0 = _mm512_dpbusd_epi32(a0, q0, x);
    a1 = _mm512_dpbusd_epi32(a1, q1, x);
    a2 = _mm512_dpbusd_epi32(a2, q2, x);
    a3 = _mm512_dpbusd_epi32(a3, q3, x);
    a4 = _mm512_dpbusd_epi32(a4, q0, y);
    a5 = _mm512_dpbusd_epi32(a5, q1, y);
    a6 = _mm512_dpbusd_epi32(a6, q2, y);
    a7 = _mm512_dpbusd_epi32(a7, q3, y);
  }
  const __m512i s =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  *sink += static_cast<float>(_mm512_reduce_add_epi32(s));
}

// E4M3 codes to f32 times 2^-120 (sign-extend, shift, mask) and 4 FMAs
// per 16 codes: 28 instructions per 64 bytes, 8 FMA chains. The Q rows
// carry the 2^120 (as Fp8Folded's do): products of the tiny widened
// codes with Q rows of order 1 would be subnormal, which take slow paths.
ATTNKIT_AVX512 inline __m512 WidenE4M3(const uint8_t* p, __m512i mask) {
  const __m128i codes = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(codes), 20), mask));
}
// The 4 query rows' values (q) times one widened vector k, into one bank
// of 4 accumulators.
struct QRows {
  __m512 q0, q1, q2, q3;
};
ATTNKIT_AVX512 inline void Fma4(const QRows& q, __m512 k, __m512& a0, __m512& a1, __m512& a2,
                                __m512& a3) {
  a0 = _mm512_fmadd_ps(q.q0, k, a0);
  a1 = _mm512_fmadd_ps(q.q1, k, a1);
  a2 = _mm512_fmadd_ps(q.q2, k, a2);
  a3 = _mm512_fmadd_ps(q.q3, k, a3);
}
ATTNKIT_AVX512 inline float SumOf8(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 a4, __m512 a5,
                                   __m512 a6, __m512 a7) {
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return _mm512_reduce_add_ps(s);
}

template <bool kL2>
ATTNKIT_AVX512 void Fp8Floor(const uint8_t* p, size_t bytes, size_t ahead, float* sink) {
  const QRows q{_mm512_set1_ps(0x1p120f), _mm512_set1_ps(-0x1p120f), _mm512_set1_ps(0x1p119f),
                _mm512_set1_ps(-0x1p119f)};
  const __m512i mask = _mm512_set1_epi32(static_cast<int32_t>(0x87F00000u));
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < bytes; i += 64) {
    if (ahead) PrefetchLine<kL2>(p + i + ahead);
    Fma4(q, WidenE4M3(p + i, mask), a0, a1, a2, a3);
    Fma4(q, WidenE4M3(p + i + 16, mask), a4, a5, a6, a7);
    Fma4(q, WidenE4M3(p + i + 32, mask), a0, a1, a2, a3);
    Fma4(q, WidenE4M3(p + i + 48, mask), a4, a5, a6, a7);
  }
  *sink += SumOf8(a0, a1, a2, a3, a4, a5, a6, a7);
}

// bf16 pairs to f32 (the low half shifted up, the high half masked) and 8
// FMAs per 32 values: 10 instructions per 64 bytes, 8 FMA chains.
template <bool kL2>
ATTNKIT_AVX512 void BF16Floor(const uint8_t* p, size_t bytes, size_t ahead, float* sink) {
  const QRows q{_mm512_set1_ps(1.0f), _mm512_set1_ps(-1.0f), _mm512_set1_ps(0.5f),
                _mm512_set1_ps(-0.5f)};
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < bytes; i += 64) {
    if (ahead) PrefetchLine<kL2>(p + i + ahead);
    const __m512i x = _mm512_load_si512(p + i);
    Fma4(q, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), a0, a1, a2, a3);
    Fma4(q, _mm512_castsi512_ps(_mm512_and_si512(x, high)), a4, a5, a6, a7);
  }
  *sink += SumOf8(a0, a1, a2, a3, a4, a5, a6, a7);
}

#undef ATTNKIT_AVX512

using FloorFn = void (*)(const uint8_t*, size_t, size_t, float*);

// K and V of the problem at `value_bytes` a value, item-major ([items,
// keys, d] each, as a BHTD cache), and per worker one tile of each.
struct KvData {
  size_t value_bytes;
  size_t item_bytes() const { return static_cast<size_t>(kKeys * kD) * value_bytes; }
  size_t tile_bytes() const { return static_cast<size_t>(kTileKeys * kD) * value_bytes; }
  Buffer k, v, l1;
  KvData(size_t vb, int workers, std::mt19937* rng)
      : value_bytes(vb),
        k(kItems * item_bytes() + kAhead),
        v(kItems * item_bytes() + kAhead),
        l1(static_cast<size_t>(workers) * 2 * tile_bytes()) {
    // Normal finite values: int8 and E4M3 codes with exponent 1-14 and
    // either sign; bf16 in [1, 2) (subnormals may take slow paths).
    std::uniform_int_distribution<int> code(0x08, 0x77), sign(0, 1);
    for (Buffer* b : {&k, &v, &l1}) {
      for (size_t i = 0; i < b->bytes; ++i) {
        b->data[i] = vb == 2 ? static_cast<uint8_t>(i % 2 ? 0x3f : code(*rng) | 0x80)
                             : static_cast<uint8_t>(code(*rng) | (sign(*rng) << 7));
      }
    }
  }
};

// One pass over every item's tiles (K's then V's rows of each), items
// spread over the pool's workers; seconds. in_l1: each worker's one tile
// of kv.l1 instead, every time.
double Pass(ThreadPool& pool, const KvData& kv, bool in_l1,
            const std::function<void(const uint8_t*, const uint8_t*, size_t, float*)>& tile,
            std::vector<float>& sinks) {
  const auto start = std::chrono::steady_clock::now();
  pool.Run(kItems, [&](int64_t item, int worker) {
    float* sink = &sinks[static_cast<size_t>(worker) * 16];  // 64 bytes apart
    const size_t tb = kv.tile_bytes();
    for (int64_t t = 0; t < kKeys / kTileKeys; ++t) {
      if (in_l1) {
        const uint8_t* w = kv.l1.data + static_cast<size_t>(worker) * 2 * tb;
        tile(w, w + tb, tb, sink);
      } else {
        const size_t off =
            static_cast<size_t>(item) * kv.item_bytes() + static_cast<size_t>(t) * tb;
        tile(kv.k.data + off, kv.v.data + off, tb, sink);
      }
    }
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// int8's real decode kernels on a tile, with `prefetch` as the decode
// calls them on dense rows (sdpa-inl.h PackedTileUpdate, l1_rows):
// VnniQDotK4 (Q.K of 4 rows; the K rows kAhead bytes on into L2, on
// Intel's CPUs the V rows there too, the tile's V rows into L1) and
// WeightedQuadsV4 (P.V; the next tile's K rows into L1 on Intel's CPUs,
// its V rows elsewhere: sdpa-inl.h's int8_next_k). With several threads
// on Intel's, P.V asks for the V rows ahead into L2 instead of Q.K
// (sdpa-inl.h's pv_v_ahead_l2).
struct Int8Kernels {
  bool several_threads = false;
  alignas(64) int8_t q[4 * kD] = {};
  int32_t qsum[4] = {};
  float qscale[4] = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
  float alpha[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> p = std::vector<float>(4 * (kTileKeys + 4), 0.25f);

  void Tile(const uint8_t* k, const uint8_t* v, bool prefetch, float* s, float* o) const {
    const int8_t* k8 = reinterpret_cast<const int8_t*>(k);
    const int8_t* v8 = reinterpret_cast<const int8_t*>(v);
    const size_t ahead_rows = prefetch ? kAhead / kD : 0;
    x86_dot::L1Rows v_l1{v, kD, kD, static_cast<size_t>(kTileKeys)};
    // On Intel's CPUs the V rows ahead into L2 as well (int8_next_k), by
    // P.V with several threads (pv_v_ahead_l2).
    const bool pv_v_ahead = prefetch && x86_dot::IntelCpu() && several_threads;
    const int8_t* v_ahead = prefetch && x86_dot::IntelCpu() && !pv_v_ahead ? v8 + kAhead : nullptr;
    x86_dot::VnniQDotK4(q, kD, qsum, qscale, k8, kD, kD, kTileKeys, s, 4,
                        prefetch ? k8 + kAhead : nullptr, kD, v_ahead, kD, ahead_rows,
                        prefetch ? v_l1 : x86_dot::L1Rows{});
    const int8_t* rows[kTileKeys + 3];
    for (int64_t j = 0; j < kTileKeys + 3; ++j) rows[j] = v8 + std::min(j, kTileKeys - 1) * kD;
    // The next tile's rows into L1 as P.V goes (sdpa-inl.h pv_next): its K
    // rows on Intel's CPUs (int8_next_k), its V rows elsewhere.
    const uint8_t* next = (x86_dot::IntelCpu() ? k : v) + kTileKeys * kD;
    const x86_dot::L1Rows next_rows{next, kD, kD, static_cast<size_t>(kTileKeys)};
    const x86_dot::L1Rows v_ahead_rows{v + kAhead, kD, kD, ahead_rows};
    x86_dot::WeightedQuadsV4(p.data(), kTileKeys, rows, kD, kD, alpha, o, kD,
                             prefetch ? next_rows : x86_dot::L1Rows{},
                             pv_v_ahead ? v_ahead_rows : x86_dot::L1Rows{});
  }
};

struct Row {
  std::string name;
  // prefetched: rows ahead into L1; prefetched_l2: into L2 (the int8
  // kernels: the decode's own schedule in both).
  std::function<void(const uint8_t*, const uint8_t*, size_t, float*)> streamed, prefetched,
      prefetched_l2;
};

int Main(int threads, int rounds, bool paired) {
  if (!__builtin_cpu_supports("avx512f") || !x86_dot::HaveVnni()) {
    std::printf("decode_floor_bench: needs AVX-512 with VNNI; this CPU has %s\n",
                __builtin_cpu_supports("avx512f") ? "AVX-512 without VNNI" : "no AVX-512");
    return 0;
  }
  std::mt19937 rng(1);
  ThreadPool pool(threads);
  std::vector<float> sinks(static_cast<size_t>(threads) * 16);
  // Per worker: scores and an accumulator for the real int8 kernels.
  std::vector<std::vector<float>> s(threads, std::vector<float>(4 * (kTileKeys + 4)));
  std::vector<std::vector<float>> o(threads, std::vector<float>(4 * kD));
  Int8Kernels int8;
  int8.several_threads = threads > 1;
  auto floor = [](FloorFn f, size_t ahead) {
    return [f, ahead](const uint8_t* k, const uint8_t* v, size_t bytes, float* sink) {
      f(k, bytes, ahead, sink);
      f(v, bytes, ahead, sink);
    };
  };
  auto real_int8 = [&](bool prefetch) {
    return [&, prefetch](const uint8_t* k, const uint8_t* v, size_t, float* sink) {
      // The worker's scratch: the sink's index says which.
      const size_t w = static_cast<size_t>(sink - sinks.data()) / 16;
      int8.Tile(k, v, prefetch, s[w].data(), o[w].data());
    };
  };
  struct Kind {
    const char* name;
    size_t value_bytes;
    std::vector<Row> rows;
  };
  const Kind kinds[] = {
      {"int8 / fp8 bytes (problems 19, 23, 24)",
       1,
       {{"read", floor(ReadFloor<false>, 0), floor(ReadFloor<false>, kAhead),
         floor(ReadFloor<true>, kAhead)},
        {"int8 floor (vpdpbusd)", floor(Int8Floor<false>, 0), floor(Int8Floor<false>, kAhead),
         floor(Int8Floor<true>, kAhead)},
        {"int8 kernels (VnniQDotK4 + WeightedQuadsV4)", real_int8(false), real_int8(true),
         real_int8(true)},
        {"fp8 floor (widen + FMA)", floor(Fp8Floor<false>, 0), floor(Fp8Floor<false>, kAhead),
         floor(Fp8Floor<true>, kAhead)}}},
      {"bf16 bytes (problems 09, 20)",
       2,
       {{"read", floor(ReadFloor<false>, 0), floor(ReadFloor<false>, kAhead),
         floor(ReadFloor<true>, kAhead)},
        {"bf16 floor (widen + FMA)", floor(BF16Floor<false>, 0), floor(BF16Floor<false>, kAhead),
         floor(BF16Floor<true>, kAhead)}}},
  };
  std::printf(
      "decode floors, B8 H32/8 Tk4096 d128 (K and V of 64 items x 4096 keys), %d threads, "
      "median of %d passes, ms a pass (GB/s of K and V; %% of %s in the same run)\n",
      threads, rounds,
      paired ? "the paired read loop's GB/s: each streamed pass after one pass of it, as "
               "`attnkit compare` times a decode"
             : "the read loop's GB/s");
  std::unique_ptr<PairedReadLoop> loop;
  if (paired) loop = std::make_unique<PairedReadLoop>(threads);
  for (const Kind& kind : kinds) {
    KvData kv(kind.value_bytes, threads, &rng);
    const double bytes = 2.0 * kItems * static_cast<double>(kv.item_bytes());
    if (loop != nullptr && !loop->Resize(static_cast<int64_t>(bytes))) {
      std::fprintf(stderr, "decode_floor_bench: no memory for the paired read loop\n");
      return 1;
    }
    std::printf("\n%s: %.1f MB\n  %-46s %20s %20s %20s %10s %16s\n", kind.name, bytes * 1e-6,
                "kernel", "streamed", "+prefetch L1", "+prefetch L2", "in L1 (c)", "read + c");
    // Rounds alternate the rows (the host is shared); each row's four ways:
    // streamed, its rows ahead into L1, into L2, and in L1 (kWays).
    constexpr size_t kWays = 4;
    std::vector<std::vector<double>> t(kind.rows.size() * kWays);
    std::vector<double> loop_seconds;  // paired: the read loop's passes
    auto streamed_pass = [&](const Row& row, int way, bool timed) {
      if (loop != nullptr) {
        const double s = loop->TimeOnePass();
        if (timed) loop_seconds.push_back(s);  // not the warming round's
      }
      return Pass(pool, kv, /*in_l1=*/false,
                  way == 0   ? row.streamed
                  : way == 1 ? row.prefetched
                             : row.prefetched_l2,
                  sinks);
    };
    for (int r = -1; r < rounds; ++r) {  // round -1 warms the caches
      for (size_t i = 0; i < kind.rows.size(); ++i) {
        double x[kWays];
        for (int way = 0; way < 3; ++way) x[way] = streamed_pass(kind.rows[i], way, r >= 0);
        x[3] = Pass(pool, kv, /*in_l1=*/true, kind.rows[i].streamed, sinks);
        if (r < 0) continue;
        for (size_t way = 0; way < kWays; ++way) t[kWays * i + way].push_back(x[way]);
      }
    }
    // The reference: what reading these bytes takes, by the paired loop's
    // median rate, or by the fastest of the streamed read rows.
    const double read = loop != nullptr
                            ? bytes / (static_cast<double>(loop->bytes()) / Median(loop_seconds))
                            : std::min({Median(t[0]), Median(t[1]), Median(t[2])});
    if (loop != nullptr) {
      std::printf("  paired read loop: %.1f GB/s (median of %zu passes)\n", bytes / read * 1e-9,
                  loop_seconds.size());
    }
    for (size_t i = 0; i < kind.rows.size(); ++i) {
      double m[kWays];
      for (size_t way = 0; way < kWays; ++way) m[way] = Median(t[kWays * i + way]);
      auto cell = [&](double x) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3f (%.1f, %3.0f%%)", x * 1e3, bytes / x * 1e-9,
                      100.0 * read / x);
        return std::string(buf);
      };
      std::printf("  %-46s %20s %20s %20s %10.3f %16s\n", kind.rows[i].name.c_str(),
                  cell(m[0]).c_str(), cell(m[1]).c_str(), cell(m[2]).c_str(), m[3] * 1e3,
                  i == 0 ? "" : cell(read + m[3]).c_str());
    }
  }
  float total = 0;
  for (float x : sinks) total += x;
  std::printf("\n(sink %g)\n", total);
  return 0;
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const bool paired = argc > 3 && std::string(argv[3]) == "paired";
  if (threads < 1 || rounds < 1 || (argc > 3 && !paired) || argc > 4) {
    std::fprintf(stderr, "usage: decode_floor_bench [threads >= 1] [rounds >= 1] [paired]\n");
    return 2;
  }
  return attnkit::Main(threads, rounds, paired);
}
#else  // x86-64 with GCC or Clang
#include <cstdio>
int main() {
  std::printf("decode_floor_bench: needs an x86-64 CPU with AVX-512\n");
  return 0;
}
#endif

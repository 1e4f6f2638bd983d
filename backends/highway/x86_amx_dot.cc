// The bf16 prefill kernels of x86_bf16_dot.cc on AMX (x86_dot.h, AmxQDotK
// and AmxWeightedSumV): tdpbf16ps multiplies a tile of 16 rows x 32 bf16
// by one of 16 x 32 (as 16 pairs of rows x 16 columns of pairs) into 16 x
// 16 f32 sums, 8192 products an instruction where vdpbf16ps does 32.
// Like vdpbf16ps, its bf16 x bf16 products are exact in f32, the sums round
// to nearest even, and subnormal inputs and results are treated as zero
// (the oracle grants that: oracle/compare.h, MayFlushBF16Products), so the
// kernels keep the contracts of BF16QDotK and BF16WeightedSumV and only the
// order of the f32 sums differs.
//
// Tiles: a process asks Linux once for the AMX state (platform/amx.h);
// each call makes sure its thread's tiles hold the shared configuration
// (x86_amx_tiles.h: 8 tiles of 16 rows x 64 bytes; here 0-3 the sums, 4-5
// the left operands, 6-7 the right ones).
#include "backends/highway/x86_dot.h"
#include "platform/amx.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/highway/x86_amx_tiles.h"
#include "backends/highway/x86_bf16_ops.h"

#define ATTNKIT_TARGET_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace attnkit {
namespace x86_dot {
namespace {

using bf16_ops::PairsOfRows;

using amx_tiles::EnsureTileConfig;
using amx_tiles::TileInputsWritten;

// Rows [0, 16) of a 16 x 16 f32 block at b (row stride ldb floats) times
// `scale`, in place.
ATTNKIT_TARGET_AMX inline void ScaleBlock(float* b, size_t ldb, float scale) {
  const __m512 sv = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r)
    _mm512_storeu_ps(b + r * ldb, _mm512_mul_ps(_mm512_loadu_ps(b + r * ldb), sv));
}

// 16 keys' K columns [c, c + 32) as tile 4's rows, keys past `keys` zero:
// the last block of a run shorter than 16 keys.
ATTNKIT_TARGET_AMX inline void LoadPartialKeys(const uint16_t* k, size_t ldk, size_t keys, size_t c,
                                               uint16_t* buf) {
  for (size_t j = 0; j < 16; ++j) {
    const __m512i row = j < keys ? _mm512_loadu_si512(k + j * ldk + c) : _mm512_setzero_si512();
    _mm512_storeu_si512(buf + 32 * j, row);
  }
  TileInputsWritten();
  _tile_loadd(4, buf, 64);
}

// Q.K of 16 keys (all of them from K, or the first `keys` of them, padded)
// against rows [r0, r0 + 32): sums into tiles 0 (rows r0..) and 1 (r0 + 16..).
ATTNKIT_TARGET_AMX inline void QDotK16(const uint32_t* qp, size_t ldq, const uint16_t* k,
                                       size_t ldk, size_t d, size_t keys, size_t r0) {
  alignas(64) uint16_t buf[16 * 32];
  _tile_zero(0);
  _tile_zero(1);
  for (size_t c = 0; c < d; c += 32) {
    if (keys == 16) {
      _tile_loadd(4, k + c, ldk * sizeof(uint16_t));
    } else {
      LoadPartialKeys(k, ldk, keys, c, buf);
    }
    _tile_loadd(6, qp + (c / 2) * ldq + r0, ldq * sizeof(uint32_t));
    _tile_loadd(7, qp + (c / 2) * ldq + r0 + 16, ldq * sizeof(uint32_t));
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
}

// O rows [r0, r0 + n) (n <= 16), columns [c0, c0 + 16) = alpha O + the
// tile's sums t (16 x 16, row stride 16): the products start from zero and
// meet alpha O at the end, as BF16WeightedSumV's do.
ATTNKIT_TARGET_AMX inline void AddBlockToO(const float* t, const float* alpha, size_t r0, size_t n,
                                           size_t c0, float* o, size_t ldo) {
  for (size_t r = 0; r < n; ++r) {
    const __m512 a = _mm512_set1_ps(alpha != nullptr ? alpha[r0 + r] : 1.0f);
    float* out = o + (r0 + r) * ldo + c0;
    _mm512_storeu_ps(out, _mm512_fmadd_ps(a, _mm512_loadu_ps(out), _mm512_loadu_ps(t + 16 * r)));
  }
}

}  // namespace

ATTNKIT_TARGET_AMX void AmxQDotK(const uint32_t* qp, size_t ldq, const uint16_t* k, size_t ldk,
                                 size_t d, size_t rows, size_t keys, float scale, float* s,
                                 size_t lds) {
  EnsureTileConfig();
  const size_t kb = ldk * sizeof(uint16_t), qb = ldq * sizeof(uint32_t), sb = lds * sizeof(float);
  size_t j = 0;
  // 32 keys x 32 rows a step: 4 sums, each loaded operand feeding two.
  for (; j + 32 <= keys; j += 32) {
    const uint16_t* kj = k + j * ldk;
    for (size_t r0 = 0; r0 < rows; r0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (size_t c = 0; c < d; c += 32) {
        _tile_loadd(4, kj + c, kb);
        _tile_loadd(5, kj + 16 * ldk + c, kb);
        _tile_loadd(6, qp + (c / 2) * ldq + r0, qb);
        _tile_loadd(7, qp + (c / 2) * ldq + r0 + 16, qb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      float* out = s + j * lds + r0;
      _tile_stored(0, out, sb);
      _tile_stored(1, out + 16, sb);
      _tile_stored(2, out + 16 * lds, sb);
      _tile_stored(3, out + 16 * lds + 16, sb);
      if (scale != 1.0f) {  // a pass of its own (the flash loop defers it to its softmax)
        ScaleBlock(out, lds, scale);
        ScaleBlock(out + 16, lds, scale);
        ScaleBlock(out + 16 * lds, lds, scale);
        ScaleBlock(out + 16 * lds + 16, lds, scale);
      }
    }
  }
  // The last keys, 16 at a time; a block of fewer goes through a buffer
  // both ways (s holds no rows past `keys`), so a key's sums never depend
  // on where its run ends.
  alignas(64) float part[2][16 * 16];
  for (; j < keys; j += 16) {
    const size_t n = keys - j < 16 ? keys - j : 16;
    for (size_t r0 = 0; r0 < rows; r0 += 32) {
      QDotK16(qp, ldq, k + j * ldk, ldk, d, n, r0);
      float* out = s + j * lds + r0;
      if (n == 16) {
        _tile_stored(0, out, sb);
        _tile_stored(1, out + 16, sb);
        if (scale != 1.0f) {
          ScaleBlock(out, lds, scale);
          ScaleBlock(out + 16, lds, scale);
        }
        continue;
      }
      _tile_stored(0, part[0], 64);
      _tile_stored(1, part[1], 64);
      const __m512 sv = _mm512_set1_ps(scale);
      for (size_t x = 0; x < n; ++x) {
        _mm512_storeu_ps(out + x * lds, _mm512_mul_ps(_mm512_load_ps(part[0] + 16 * x), sv));
        _mm512_storeu_ps(out + x * lds + 16, _mm512_mul_ps(_mm512_load_ps(part[1] + 16 * x), sv));
      }
    }
  }
}

ATTNKIT_TARGET_AMX void AmxWeightedSumV(const uint32_t* pp, size_t ldpp, const uint32_t* vp,
                                        size_t ldvp, size_t key_pairs, const float* alpha,
                                        size_t rows, size_t dp, float* o, size_t ldo,
                                        const float* key_end) {
  EnsureTileConfig();
  constexpr size_t kChunks = kMaxAmxKeys / 32;  // of 16 key pairs
  // P transposed for two blocks of 16 rows: pt[b][ch] is the left operand
  // of rows r0 + 16 b, key pairs [16 ch, 16 ch + 16) (row r: its 16 pairs).
  alignas(64) uint32_t pt[2][kChunks][16 * 16];
  // The last chunk of V's pairs when it holds fewer than 16: zero rows past
  // them (V's storage past key_pairs may hold anything, NaN included).
  alignas(64) uint32_t vlast[16 * 32];
  alignas(64) float sums[4][16 * 16];
  const size_t vb = ldvp * sizeof(uint32_t);
  for (size_t r0 = 0; r0 < rows; r0 += 32) {
    const size_t n0 = rows - r0 < 16 ? rows - r0 : 16;
    const size_t n1 = rows - r0 <= 16 ? 0 : rows - r0 - 16 < 16 ? rows - r0 - 16 : 16;
    const size_t pairs0 = PairsOfRows(key_end, r0, n0, key_pairs);
    const size_t pairs1 = n1 == 0 ? 0 : PairsOfRows(key_end, r0 + 16, n1, key_pairs);
    const size_t pairs = pairs0 > pairs1 ? pairs0 : pairs1;
    const size_t chunks = (pairs + 15) / 16;
    // Transposed with zeros past each block's own pairs and rows: the
    // weights there are unwritten (x86_dot.h).
    for (size_t b = 0; b < 2; ++b) {
      const size_t own = b == 0 ? pairs0 : pairs1;
      for (size_t ch = 0; ch < chunks; ++ch) {
        const uint16_t* in[16];
        for (size_t i = 0; i < 16; ++i) {
          const size_t jp = 16 * ch + i;
          in[i] =
              jp < own ? reinterpret_cast<const uint16_t*>(pp + jp * ldpp + r0 + 16 * b) : nullptr;
        }
        BF16TransposePairs(in, 16, pt[b][ch], 16);
      }
    }
    TileInputsWritten();
    const size_t full = pairs / 16;  // chunks read from vp in place
    for (size_t c0 = 0; c0 < dp; c0 += 32) {
      const bool two = c0 + 16 < dp;  // a second block of 16 columns
      if (full < chunks) {
        for (size_t i = 0; i < 16; ++i) {
          const size_t jp = 16 * full + i;
          const uint32_t* row = vp + jp * ldvp + c0;
          const __m512i lo = jp < pairs ? _mm512_loadu_si512(row) : _mm512_setzero_si512();
          const __m512i hi =
              jp < pairs && two ? _mm512_loadu_si512(row + 16) : _mm512_setzero_si512();
          _mm512_store_si512(vlast + 32 * i, lo);
          _mm512_store_si512(vlast + 32 * i + 16, hi);
        }
        TileInputsWritten();
      }
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (size_t ch = 0; ch < chunks; ++ch) {
        _tile_loadd(4, pt[0][ch], 64);
        _tile_loadd(5, pt[1][ch], 64);
        if (ch < full) {
          _tile_loadd(6, vp + 16 * ch * ldvp + c0, vb);
          if (two) _tile_loadd(7, vp + 16 * ch * ldvp + c0 + 16, vb);
        } else {
          _tile_loadd(6, vlast, 128);
          _tile_loadd(7, vlast + 16, 128);
        }
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 5, 6);
        if (two) {
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, sums[0], 64);
      _tile_stored(2, sums[2], 64);
      AddBlockToO(sums[0], alpha, r0, n0, c0, o, ldo);
      if (n1 > 0) AddBlockToO(sums[2], alpha, r0 + 16, n1, c0, o, ldo);
      if (two) {
        _tile_stored(1, sums[1], 64);
        _tile_stored(3, sums[3], 64);
        AddBlockToO(sums[1], alpha, r0, n0, c0 + 16, o, ldo);
        if (n1 > 0) AddBlockToO(sums[3], alpha, r0 + 16, n1, c0 + 16, o, ldo);
      }
    }
  }
}

ATTNKIT_TARGET_AMX double AmxBF16PeakLoop(int64_t iterations) {
  EnsureTileConfig();
  alignas(64) uint16_t ones[16 * 32];
  for (uint16_t& x : ones) x = 0x3f80;  // 1.0
  TileInputsWritten();
  alignas(64) float out[16 * 16];
  // Six sums: more than the instruction's latency over its issue interval.
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, out, 64);
  volatile float sink = out[0];
  (void)sink;
  return 16384.0 * 6.0 * static_cast<double>(iterations);
}

bool HaveAmxBF16() {
  static const bool have = [] {
    const char* env = std::getenv("ATTNKIT_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return HaveBF16Dot() && AmxTilesGranted();
  }();
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveAmxBF16() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveAmxBF16() { return false; }
double AmxBF16PeakLoop(int64_t) { return 0; }
void AmxQDotK(const uint32_t*, size_t, const uint16_t*, size_t, size_t, size_t, size_t, float,
              float*, size_t) {}
void AmxWeightedSumV(const uint32_t*, size_t, const uint32_t*, size_t, size_t, const float*, size_t,
                     size_t, float*, size_t, const float*) {}

}  // namespace x86_dot
}  // namespace attnkit

#endif

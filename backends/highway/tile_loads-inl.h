// Per-target loads of the flash attention loop: an item's query rows (scaled,
// transposed or row-major), K/V tiles converted to f32, and the prefetches
// and int8 row scales of direct tiles. Included once per target (toggle guard).

#if defined(ATTNKIT_BACKENDS_HIGHWAY_TILE_LOADS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_TILE_LOADS_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_TILE_LOADS_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_TILE_LOADS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/highway/flash_params.h"
#include "backends/highway/microkernels-inl.h"
#include "backends/highway/tiling.h"
#include "backends/highway/x86_dot.h"
#include "core/dtype.h"
#include "core/fast_compute.h"
#include "core/tensor.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "platform/prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

using highway_plan::Item;
using highway_plan::Tiling;

// out[c] = Q[b, h, i, c] as stored, widened to f32, for c < d.
// Vectorised for contiguous rows (an element at a time through LoadAsF32 was
// 6-10 % of an f32 prefill).
inline void LoadQueryRowAsIs(const FlashParams& p, int64_t b, int64_t h, int64_t i,
                             float* HWY_RESTRICT out) {
  const size_t d = static_cast<size_t>(p.head_dim);
  const char* row = static_cast<const char*>(p.q.data) +
                    p.q.Offset(b, h, i, 0) * static_cast<int64_t>(DTypeSize(p.q.dtype));
  LoadRowAsF32(row, p.q.dtype, p.q.strides[3], d, d, out);
}

// out[c] = scale * Q[b, h, i, c] for c < d, with Q rounded as FAST rounds
// it (p.round_q; core/fast_compute.h): to K's 16-bit type, or to its int8
// values times the row's scale (all NaN for a row holding a NaN or Inf).
inline void LoadQueryRow(const FlashParams& p, int64_t b, int64_t h, int64_t i, float scale,
                         float* HWY_RESTRICT out) {
  const int64_t d = p.head_dim;
  LoadQueryRowAsIs(p, b, h, i, out);
  if (p.round_q && p.k.dtype == DType::kI8) {
    int8_t qi[kProblemMaxHeadDim];
    // One factor per row, as the VNNI kernels apply it (oracle/compare.h:
    // the integer values are exact, then two multiplies per score).
    const float factor = scale * QuantizeQueryRow(out, d, qi);
    for (int64_t c = 0; c < d; ++c) out[c] = qi[c] * factor;
    return;
  }
  if (p.round_q) {
    for (int64_t c = 0; c < d; ++c) out[c] = RoundQueryValue(out[c], p.k.dtype);
  }
  ScaleRowInPlace(out, static_cast<size_t>(d), scale);
}

// Q's element offset of row r of the item (a head-major stack of nh heads x
// nq queries), column 0.
inline int64_t QueryRowOffset(const FlashParams& p, const Item& it, int64_t r) {
  return p.q.Offset(it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, 0);
}

// Every line of the item's first `rows` Q rows requested at once, into L1
// (kPrefetch = PrefetchL1) or L2 (PrefetchL2): the item's Q is cold (read
// once per call), and row by row its misses would wait one after another.
// By inline assembly (platform/prefetch.h), which GCC 12 never deletes.
template <void (*kPrefetch)(const void*) = PrefetchL1>
inline void PrefetchQueryRows(const FlashParams& p, const Item& it, int64_t rows) {
  const size_t es = DTypeSize(p.q.dtype);
  const size_t row_bytes = static_cast<size_t>((p.head_dim - 1) * p.q.strides[3] + 1) * es;
  for (int64_t r = 0; r < rows; ++r) {
    const char* q = static_cast<const char*>(p.q.data) + QueryRowOffset(p, it, r) * es;
    for (size_t off = 0; off < row_bytes; off += 64) kPrefetch(q + off);
  }
}
// All of an item's Q rows into L2: the item a thread will likely run next.
inline void PrefetchQueryRowsL2(const FlashParams& p, const Item& it) {
  PrefetchQueryRows<PrefetchL2>(p, it, it.nh * it.nq);
}

// index[r] = (Q offset of item row min(r0 + r, rows - 1) - base) / unit
// for r < n, and true; false where an offset is not a multiple of unit or
// the quotient does not fit int32 (a gather's indices).
inline bool QueryRowIndex(const FlashParams& p, const Item& it, int64_t r0, int64_t rows, int64_t n,
                          int64_t base, int64_t unit, int32_t* HWY_RESTRICT index) {
  for (int64_t r = 0; r < n; ++r) {
    const int64_t off = QueryRowOffset(p, it, std::min(r0 + r, rows - 1)) - base;
    if (off % unit != 0 || off / unit < INT32_MIN || off / unit > INT32_MAX) return false;
    index[r] = static_cast<int32_t>(off / unit);
  }
  return true;
}

// LoadQueryTile for f32 Q stored with unit column stride and not rounded: a
// vector of rows at a time, each column gathered straight from Q and scaled
// in registers (one multiply, as LoadQueryRow's: the same bits). Loading
// rows and transposing them element by element through a block took 10 % of
// an f32 prefill at T512 d64 on Zen 5. Lanes past `rows` read the last row
// (the caller zeroes them). False, with qt partly written, where a block's
// row offsets do not fit the gather's int32 indices.
inline bool GatherQueryTileF32(const FlashParams& p, const Item& it, int64_t rows, int64_t mp,
                               float* HWY_RESTRICT qt) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF scale = hn::Set(df, p.scale);
  const float* q = static_cast<const float*>(p.q.data);
  HWY_ALIGN int32_t index[HWY_MAX_BYTES / sizeof(int32_t)];
  for (int64_t r0 = 0; r0 < rows; r0 += N) {
    const int64_t base = QueryRowOffset(p, it, r0);
    if (!QueryRowIndex(p, it, r0, rows, N, base, /*unit=*/1, index)) return false;
    const auto vindex = hn::Load(di, index);
    const float* HWY_RESTRICT src = q + base;
    float* HWY_RESTRICT dst = qt + r0;
    for (int64_t c = 0; c < p.head_dim; ++c) {
      hn::Store(hn::Mul(hn::GatherIndex(df, src + c, vindex), scale), df, dst + c * mp);
    }
  }
  return true;
}

// LoadQueryPairs for bf16 Q stored with unit column stride: a vector of
// rows at a time, each pair of columns gathered straight from Q as one
// 32-bit lane. Row by row, each row's pairs went to as many lines of qp
// (rows_padded x 4 bytes apart), which a 128-row tile (MLA decode: 147 KiB
// at d = 576) evicts from L1 before the next row: 3 % of that decode.
// False, with qp partly written, where a block's first row is not 4-byte
// aligned or its row offsets are odd or do not fit int32 indices; lanes
// past `rows` read the last row (the caller zeroes them).
inline bool GatherQueryPairsBF16(const FlashParams& p, const Item& it, int64_t rows, int64_t mp,
                                 uint32_t* HWY_RESTRICT qp) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(du));
  const uint16_t* q = static_cast<const uint16_t*>(p.q.data);
  HWY_ALIGN int32_t index[HWY_MAX_BYTES / sizeof(int32_t)];
  for (int64_t r0 = 0; r0 < rows; r0 += N) {
    const int64_t base = QueryRowOffset(p, it, r0);
    if (reinterpret_cast<uintptr_t>(q + base) % alignof(uint32_t) != 0 ||
        !QueryRowIndex(p, it, r0, rows, N, base, /*unit=*/2, index)) {  // in pairs
      return false;
    }
    const auto vindex = hn::Load(di, index);
    const uint32_t* HWY_RESTRICT src = reinterpret_cast<const uint32_t*>(q + base);
    uint32_t* HWY_RESTRICT dst = qp + r0;
    for (int64_t c2 = 0; c2 < p.head_dim / 2; ++c2) {
      hn::Store(hn::GatherIndex(du, src + c2, vindex), du, dst + c2 * mp);
    }
  }
  return true;
}

// The bf16 dot-product tiles (x86_dot.h): qp[(c / 2) * rows_padded + r] =
// the bf16 pair (Q[r, c], Q[r, c + 1]) of the item's rows, unscaled (the
// kernel scales the scores), rounded as FAST rounds (bf16 Q is exact);
// padded rows are 0. d is even. row: scratch of head_dim floats.
inline void LoadQueryPairs(const FlashParams& p, const Tiling& t, const Item& it,
                           uint32_t* HWY_RESTRICT qp, float* HWY_RESTRICT row) {
  const int64_t mp = t.rows_padded, pairs = p.head_dim / 2;
  const int64_t rows = it.nh * it.nq;
  PrefetchQueryRows(p, it, rows);
  // Gathers are slower where the tile stays in L1 (GQA H32/8 T1024 d128
  // bf16 prefill, 16 KiB: query phase 1.9-2.3 -> 2.7-2.9 ms).
  constexpr int64_t kL1TileBytes = 32 << 10;
  const bool stored_pairs = p.q.dtype == DType::kBF16 && p.q.strides[3] == 1;
  const bool gathered = stored_pairs &&
                        pairs * mp * static_cast<int64_t>(sizeof(uint32_t)) > kL1TileBytes &&
                        GatherQueryPairsBF16(p, it, rows, mp, qp);
  // Elsewhere stored pairs go 16 rows at a time through a transpose in
  // registers (x86_dot::BF16TransposePairs), where a pair at a time took a
  // store each (bf16 d64 causal prefills, one thread, Zen 5, alternating
  // builds, three rounds: query phase 0.47-0.50 -> 0.25-0.28 ms under EXACT
  // and FAST); padded rows come out 0.
  if (stored_pairs && !gathered && mp % 16 == 0) {
    const uint16_t* row_at[16];
    for (int64_t r0 = 0; r0 < mp; r0 += 16) {
      for (int64_t r = r0; r < r0 + 16; ++r) {
        row_at[r - r0] = r < rows ? static_cast<const uint16_t*>(p.q.data) +
                                        p.q.Offset(it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, 0)
                                  : nullptr;
      }
      x86_dot::BF16TransposePairs(row_at, static_cast<size_t>(pairs), qp + r0,
                                  static_cast<size_t>(mp));
    }
    return;
  }
  for (int64_t r = 0; r < (gathered ? 0 : rows); ++r) {
    const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
    if (stored_pairs) {  // the stored pairs as they are
      const char* src = static_cast<const char*>(p.q.data) + p.q.Offset(it.b, h, i, 0) * 2;
      for (int64_t c2 = 0; c2 < pairs; ++c2) std::memcpy(&qp[c2 * mp + r], src + 4 * c2, 4);
      continue;
    }
    LoadQueryRow(p, it.b, h, i, 1.0f, row);
    for (int64_t c2 = 0; c2 < pairs; ++c2) {
      qp[c2 * mp + r] = static_cast<uint32_t>(BF16FromF32(row[2 * c2])) |
                        static_cast<uint32_t>(BF16FromF32(row[2 * c2 + 1])) << 16;
    }
  }
  for (int64_t c2 = 0; c2 < pairs; ++c2) {
    for (int64_t r = rows; r < mp; ++r) qp[c2 * mp + r] = 0;
  }
}

// The VNNI decode tiles (x86_dot.h): each row of the item quantized as FAST
// quantizes it (QuantizeQueryRow), q8[r * ldq8 + c] (zero for c >= d up to
// ldq8), row_scale[r] = scale * the row's int8 scale (NaN for a row holding
// a NaN or Inf: its scores are NaN), q_sum128[r] = 128 * sum_c q8[r, c].
// Rows up to rows_padded are 0. row: scratch of head_dim floats.
inline void LoadQueryInt8(const FlashParams& p, const Tiling& t, const Item& it, size_t ldq8,
                          int8_t* HWY_RESTRICT q8, int32_t* HWY_RESTRICT q_sum128,
                          float* HWY_RESTRICT row_scale, float* HWY_RESTRICT row) {
  const int64_t d = p.head_dim, rows = it.nh * it.nq;
  std::fill(q8, q8 + t.rows_padded * ldq8, int8_t{0});
  for (int64_t r = 0; r < t.rows_padded; ++r) {
    q_sum128[r] = 0;
    row_scale[r] = 0.0f;
    if (r >= rows) continue;
    LoadQueryRowAsIs(p, it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, row);
    int8_t* qr = q8 + r * ldq8;
    // The same bits in vectors where they can (QuantizeQueryRowInt8).
    float scale = 0.0f;
    int32_t sum = 0;
    if (d % static_cast<int64_t>(hn::Lanes(DF())) != 0 ||
        !QuantizeQueryRowInt8(row, static_cast<size_t>(d), qr, &scale, &sum)) {
      scale = QuantizeQueryRow(row, d, qr);
      for (int64_t c = 0; c < d; ++c) sum += qr[c];
    }
    row_scale[r] = p.scale * scale;
    q_sum128[r] = 128 * sum;
  }
}

// Qt[c, r] = scale * Q[b, h0 + r / nq, q0 + r % nq, c]; padded rows are 0.
// Blocks of kBlock rows are loaded row-major, then written column by
// column, kBlock consecutive floats of qt each: a row at a time, the writes
// strode mp floats and touched every line of qt per row (10 % of a GQA d128
// prefill on Zen 5, with qt, O and the K/V tiles sharing L1).
inline void LoadQueryTile(const FlashParams& p, const Tiling& t, const Item& it,
                          float* HWY_RESTRICT qt) {
  constexpr int64_t kBlock = 16;
  const int64_t mp = t.rows_padded, d = p.head_dim;
  const int64_t rows = it.nh * it.nq;
  HWY_ALIGN float block[kBlock * kProblemMaxHeadDim];
  PrefetchQueryRows(p, it, rows);
  const bool gathered = p.q.dtype == DType::kF32 && p.q.strides[3] == 1 && !p.round_q &&
                        GatherQueryTileF32(p, it, rows, mp, qt);
  for (int64_t r0 = 0; r0 < rows && !gathered; r0 += kBlock) {
    const int64_t n = std::min(kBlock, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t at = r0 + r;
      LoadQueryRow(p, it.b, it.h0 + at / it.nq, it.q0 + at % it.nq, p.scale, block + r * d);
    }
    for (int64_t c = 0; c < d; ++c) {
      float* HWY_RESTRICT dst = qt + c * mp + r0;
      for (int64_t r = 0; r < n; ++r) dst[r] = block[r * d + c];
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t r = rows; r < mp; ++r) qt[c * mp + r] = 0.0f;
  }
}

// fp8 decode under FAST (x86_dot::Fp8QDotK4): the item's Q rows rounded to
// bf16 (RoundQueryValue, to nearest even), unscaled (the kernel multiplies
// the dot products by p.scale), in the kernel's block layout
// (x86_dot::Fp8QueryBlocks), rows 4 d values apart: zero rows past the
// item's, as row groups of 4 read whole. d a multiple of 8.
inline void LoadQueryBlocksBF16(const FlashParams& p, const Item& it, uint16_t* HWY_RESTRICT out,
                                float* HWY_RESTRICT row) {
  const int64_t d = p.head_dim, rows = it.nh * it.nq, ldq = 4 * d;
  const int64_t rows4 = (rows + 3) / 4 * 4;
  uint16_t bf[kProblemMaxHeadDim];
  std::fill(out + rows * ldq, out + rows4 * ldq, uint16_t{0});
  for (int64_t r = 0; r < rows; ++r) {
    LoadQueryRowAsIs(p, it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, row);
    for (int64_t c = 0; c < d; ++c) bf[c] = BF16FromF32(row[c]);
    x86_dot::Fp8QueryBlocks(bf, static_cast<size_t>(d), out + r * ldq);
  }
}

// The item's Q rows as bf16 for x86_dot::BF16QDotK4: out[r * ldq + c] =
// bf16(Q[b, h0 + r / nq, q0 + r % nq, c]) (nearest even: FAST's rounding,
// exact for bf16 Q), unscaled, zero for c in [d, ldq) and for rows up to a
// whole group of 4.
inline void LoadQueryRowsBF16(const FlashParams& p, const Item& it, int64_t ldq,
                              uint16_t* HWY_RESTRICT out, float* HWY_RESTRICT row) {
  const int64_t d = p.head_dim, rows = it.nh * it.nq;
  const int64_t rows4 = (rows + 3) / 4 * 4;
  std::fill(out, out + rows4 * ldq, uint16_t{0});
  for (int64_t r = 0; r < rows; ++r) {
    LoadQueryRowAsIs(p, it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, row);
    for (int64_t c = 0; c < d; ++c) out[r * ldq + c] = BF16FromF32(row[c]);
  }
}

// Narrow tiles (QDotKRows): the same rows row-major, without the transposed
// tile: q[r, c] = scale * Q[b, h0 + r / nq, q0 + r % nq, c], zero-padded to
// [rows_padded, dp]. f32 rows are read as rows (the per-item setup of decode).
inline void LoadQueryRows(const FlashParams& p, const Tiling& t, const Item& it,
                          float* HWY_RESTRICT q) {
  const int64_t d = p.head_dim, dp = t.dp, rows = it.nh * it.nq;
  const bool plain = p.q.dtype == DType::kF32 && p.q.strides[3] == 1 && !p.round_q;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = p.q.Offset(it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, 0);
    float* HWY_RESTRICT qr = q + r * dp;
    if (plain) {
      const float* HWY_RESTRICT src = static_cast<const float*>(p.q.data) + base;
      for (int64_t c = 0; c < d; ++c) qr[c] = p.scale * src[c];
    } else {
      LoadQueryRow(p, it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, p.scale, qr);
    }
    std::fill(qr + d, qr + dp, 0.0f);
  }
  std::fill(q + rows * dp, q + t.rows_padded * dp, 0.0f);
}

// Rows [k0, k0 + nk) of K and V for (b, g), as f32 [key_tile, dp] and
// [key_tile, dvp] (V's rows t.ldv apart); rows
// [nk, nk_padded) are zero. Also prefetches rows [next_k0, next_k0 + nk) (the
// next tile), so their cache misses overlap this tile's compute instead of
// stalling the next conversion: decode is bound by exactly these reads.
// with_k false: V only (the bf16 dot products read K storage as is).
inline void LoadKeyValueTile(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0,
                             int64_t nk, int64_t nk_padded, int64_t next_k0, int64_t next_nk,
                             float* HWY_RESTRICT k, float* HWY_RESTRICT v, bool with_k = true) {
  const size_t d = static_cast<size_t>(p.head_dim), dp = static_cast<size_t>(t.dp);
  const size_t dv = static_cast<size_t>(p.value_dim), dvp = static_cast<size_t>(t.dvp);
  const size_t ldv = static_cast<size_t>(t.ldv);
  const size_t es = DTypeSize(p.k.dtype);
  const char* kbase = static_cast<const char*>(p.k.data);
  const char* vbase = static_cast<const char*>(p.v.data);
  const size_t k_bytes = (d - 1) * static_cast<size_t>(p.k.strides[3]) * es + es;
  const size_t v_bytes = (dv - 1) * static_cast<size_t>(p.v.strides[3]) * es + es;
  const KvRows& rows = p.kv_rows;
  for (int64_t j = 0; j < nk; ++j) {
    if (j < next_nk) {
      const char* kn = kbase + rows.Offset(p.k, it.b, it.g, next_k0 + j) * es;
      const char* vn = vbase + rows.Offset(p.v, it.b, it.g, next_k0 + j) * es;
      for (size_t off = 0; off < k_bytes; off += 64) hwy::Prefetch(kn + off);
      for (size_t off = 0; off < v_bytes; off += 64) hwy::Prefetch(vn + off);
    }
    const char* kp = kbase + rows.Offset(p.k, it.b, it.g, k0 + j) * es;
    const char* vp = vbase + rows.Offset(p.v, it.b, it.g, k0 + j) * es;
    if (with_k) LoadRowAsF32(kp, p.k.dtype, p.k.strides[3], d, dp, k + j * dp);
    LoadRowAsF32(vp, p.v.dtype, p.v.strides[3], dv, dvp, v + j * ldv);
    if (p.int8()) {  // int8 and fp8 rows times their scales: the dequantized values
      // Whole vectors (the padding is 0): a scalar loop here re-read each
      // float of the vector just stored, which store forwarding does not
      // serve (Zen 3: 2/3 of an fp8 decode's time).
      const DF df;
      const size_t N = hn::Lanes(df);
      if (with_k) {
        const auto ks =
            hn::Set(df, p.k_scale[rows.ScaleOffset(p.k_scale_view, it.b, it.g, k0 + j)]);
        float* HWY_RESTRICT kr = k + j * dp;
        for (size_t c = 0; c < dp; c += N)
          hn::StoreU(hn::Mul(hn::LoadU(df, kr + c), ks), df, kr + c);
      }
      const auto vs = hn::Set(df, p.v_scale[rows.ScaleOffset(p.v_scale_view, it.b, it.g, k0 + j)]);
      float* HWY_RESTRICT vr = v + j * ldv;
      for (size_t c = 0; c < dvp; c += N)
        hn::StoreU(hn::Mul(hn::LoadU(df, vr + c), vs), df, vr + c);
    }
  }
  for (int64_t j = nk; j < nk_padded; ++j) {
    if (with_k) std::fill(k + j * dp, k + (j + 1) * dp, 0.0f);
    std::fill(v + j * ldv, v + j * ldv + dvp, 0.0f);
  }
}
// Prefetches rows [k0, k0 + nk) of K and V for (b, g): the first rows of a
// direct decode item, before the kernels' own prefetching (AheadRows) starts.
inline void PrefetchKeyValueRows(const FlashParams& p, const Item& it, int64_t k0, int64_t nk) {
  const size_t es = DTypeSize(p.k.dtype);
  const size_t k_bytes = static_cast<size_t>(p.head_dim) * es;
  const size_t v_bytes = static_cast<size_t>(p.value_dim) * es;
  for (int64_t j = 0; j < nk; ++j) {
    const char* kp =
        static_cast<const char*>(p.k.data) + p.kv_rows.Offset(p.k, it.b, it.g, k0 + j) * es;
    const char* vp =
        static_cast<const char*>(p.v.data) + p.kv_rows.Offset(p.v, it.b, it.g, k0 + j) * es;
    for (size_t off = 0; off < k_bytes; off += 64) hwy::Prefetch(kp + off);
    for (size_t off = 0; off < v_bytes; off += 64) hwy::Prefetch(vp + off);
  }
}

// Calls visit(j, s, len, stride) for each run (page) of the scales of int8
// or fp8 rows [k0, k0 + nk) of (b, g): row k0 + j + i's scale is s[i *
// stride] for i < len (stride 0: a per-tensor view). A packed tile may span
// two pages.
template <class Visit>
inline void ForEachScaleRun(const FlashParams& p, const float* scale, const TensorView& view,
                            const Item& it, int64_t k0, int64_t nk, const Visit& visit) {
  const int64_t stride = p.kv_rows.paged() ? view.strides[1] : view.strides[2];
  for (int64_t j = 0, len = 0; j < nk; j += len) {
    len = std::min(nk - j, p.kv_rows.RunLength(k0 + j));
    visit(j, scale + p.kv_rows.ScaleOffset(view, it.b, it.g, k0 + j), len, stride);
  }
}

// The scales of rows [k0, k0 + nk) of (b, g): out[j] for j < nk. Not
// prefetched: a loop prefetching each tile's scales ahead was measured
// (Zen 5, B8 H32/8 Tk4096 d128 int8 and E4M3 FAST decode, alternating
// rounds in one process) within 3 % either way of none, which is what its
// binary had held (GCC 12 had deleted the loop: platform/prefetch.h). Nor
// vectorized: a stride-1 copy GCC vectorizes cut the kv load phase with K
// and V in L3 (B1, one thread: 0.026-0.031 -> 0.012 ms), but from memory
// the tiles then waited longer than that (`compare`, B8, alternating
// builds, three rounds: int8 FAST one thread 2.66-2.73 -> 2.68-2.80 ms,
// two 1.37-1.43 -> 1.46-1.69; E4M3 FAST one thread 3.14-3.42 -> 3.38-3.44).
inline void GatherRowScales(const FlashParams& p, const float* scale, const TensorView& view,
                            const Item& it, int64_t k0, int64_t nk, float* HWY_RESTRICT out) {
  ForEachScaleRun(p, scale, view, it, k0, nk,
                  [out](int64_t j, const float* s, int64_t len, int64_t stride) {
                    for (int64_t i = 0; i < len; ++i) out[j + i] = s[i * stride];
                  });
}

// The scales of rows [k0, k0 + nk) of (b, g) as a direct tile reads them:
// where they lie when they are one run of consecutive floats (a dense cache
// with a scale per row) and the vector PackedScale may load past the
// tile's last key (HWY_MAX_BYTES) still lies in the tensor's row of
// scales; otherwise gathered into buf (GatherRowScales) and buf returned.
// The gather was a tenth of the int8 FAST decode's time with K and V in L2
// (one thread, B1 H4/1 Tk4096 d128, Xeon with AMX, phase_bench, 64 tiles a
// call: its kv load phase 0.009 ms, 0.005 with the gather skipped, 0.006
// with the scales read in place).
inline const float* TileRowScales(const FlashParams& p, const float* scale, const TensorView& view,
                                  const Item& it, int64_t k0, int64_t nk, float* HWY_RESTRICT buf) {
  constexpr int64_t kVectorFloats = HWY_MAX_BYTES / sizeof(float);
  if (!p.kv_rows.paged() && view.strides[2] == 1 && k0 + nk + kVectorFloats <= view.shape[2]) {
    return scale + p.kv_rows.ScaleOffset(view, it.b, it.g, k0);
  }
  GatherRowScales(p, scale, view, it, k0, nk, buf);
  return buf;
}

// A direct tile's K and V storage rows, run by run: run r holds the tile's
// keys [begin[r], begin[r + 1]), row j of it at k[r] + (j - begin[r]) * ldk
// (V likewise). Dense K/V is one run; paged K/V one per page the tile
// touches. Tiles lie within aligned blocks of their key_tile keys and pages
// are powers of two of at least kMinPageSize keys, so a tile touches at most
// key_tile / kMinPageSize <= kMaxTileRuns pages.
template <typename T>
struct TileRuns {
  int count = 0;
  int64_t begin[highway_plan::kMaxTileRuns + 1] = {};  // begin[count] = the tile's keys
  const T* k[highway_plan::kMaxTileRuns] = {};
  const T* v[highway_plan::kMaxTileRuns] = {};
  size_t ldk = 0, ldv = 0;

  int64_t Keys(int r) const { return begin[r + 1] - begin[r]; }
  // The run that holds key j (< begin[count]).
  int RunOf(int64_t j) const {
    int r = 0;
    while (r + 1 < count && begin[r + 1] <= j) ++r;
    return r;
  }
  const T* VRow(int64_t j) const {
    const int r = RunOf(j);
    return v[r] + (j - begin[r]) * static_cast<int64_t>(ldv);
  }
};

// The same rows read as storage tag U (a tag of the same bytes).
template <typename U, typename T>
HWY_INLINE TileRuns<U> RecastTileRuns(const TileRuns<T>& a) {
  static_assert(sizeof(U) == sizeof(T), "a tag of the same storage");
  TileRuns<U> b;
  b.count = a.count;
  b.ldk = a.ldk;
  b.ldv = a.ldv;
  for (int r = 0; r <= a.count; ++r) b.begin[r] = a.begin[r];
  for (int r = 0; r < a.count; ++r) {
    b.k[r] = reinterpret_cast<const U*>(a.k[r]);
    b.v[r] = reinterpret_cast<const U*>(a.v[r]);
  }
  return b;
}

// The runs of direct tile [k0, k0 + nk) of item `it` (t.direct: K and V rows
// of T with contiguous elements).
template <typename T>
TileRuns<T> DirectTileRuns(const FlashParams& p, const Item& it, int64_t k0, int64_t nk) {
  TileRuns<T> runs;
  runs.ldk = static_cast<size_t>(p.k_row_stride);
  runs.ldv = static_cast<size_t>(p.v_row_stride);
  for (int64_t j = 0, len = 0; j < nk; j += len) {
    len = std::min(nk - j, p.kv_rows.RunLength(k0 + j));
    HWY_DASSERT(runs.count < highway_plan::kMaxTileRuns);
    runs.begin[runs.count] = j;
    runs.k[runs.count] =
        static_cast<const T*>(p.k.data) + p.kv_rows.Offset(p.k, it.b, it.g, k0 + j);
    runs.v[runs.count] =
        static_cast<const T*>(p.v.data) + p.kv_rows.Offset(p.v, it.b, it.g, k0 + j);
    ++runs.count;
  }
  runs.begin[runs.count] = nk;
  return runs;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard

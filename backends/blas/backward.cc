#include "backends/blas/backward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/blas/grad_row_ops.h"
#include "backends/blas/row_ops.h"
#include "core/alibi.h"
#include "core/dtype.h"
#include "core/fast_compute.h"
#include "core/mask.h"

namespace attnkit {
namespace blas {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kAlign = 64;
constexpr int64_t kMinKeyChunk = 16;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t AlignedFloats(int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// 2-byte elements rounded up to whole 64-byte lines.
size_t AlignedHalves(int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(uint16_t);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// `accumulators`: dk and dv live in the worker's region (not kPartitioned).
// d is E (Q, K, dQ, dK), dv is Ev (V, O, dO, dV).
size_t BackwardWorkerBytes(int64_t span, int64_t rows, int64_t key_chunk, int64_t d, int64_t dv,
                           bool softcap, bool accumulators, bool gemm16, bool round16) {
  return (accumulators ? 2 : 1) * (AlignedFloats(span * d) + AlignedFloats(span * dv))
         // kf, vf (, dk, dv)
         + 2 * AlignedFloats(std::max(rows * d, dv))            // q, dq
         + AlignedFloats(rows * dv)                             // d_o
         + 2 * AlignedFloats(rows)                              // row_d, lse
         + (softcap ? 3 : 2) * AlignedFloats(rows * key_chunk)  // s, dp (, dcap)
         + (gemm16 ? AlignedHalves(span * d) + AlignedHalves(span * dv) + AlignedHalves(rows * d) +
                         AlignedHalves(rows * dv)
                   : 0)                                      // kh, vh, qh, doh
         + (round16 ? AlignedHalves(rows * key_chunk) : 0);  // g16
}

// A kPartitioned partial (one dK or dV of a pair's part) in floats.
int64_t PartialFloats(int64_t span, int64_t d, int64_t dv) { return span * std::max(d, dv); }

// One worker's scratch, carved from its region. Floats (E = d, Ev = dv):
//   kf [span, E], vf [span, Ev]: K and V rows of the span (or of one
//     chunk) as f32;
//   dk [span, E], dv [span, Ev]: their gradients' f32 accumulators
//     (kPartitioned: a slot of the shared partials instead);
//   q [rows, E], d_o [rows, Ev], dq [rows, E]: the block's Q and dO as
//     f32, dQ's accumulator (q and dq hold at least Ev floats: an O row and
//     MergeItem's sum pass through them);
//   row_d [rows]: D = rowsum(dO O); lse [rows] (-inf: the row sees no key);
//   s [rows, key_chunk]: S, then P; dp: dP, then dS, then dX;
//   dcap [rows, key_chunk]: the soft-cap's derivative at each score (only
//   with softcap), taken from the score before capping.
// With plan.gemm16, 16-bit copies of the staged rows (Narrow16), whose
// flags say whether every row of the copy is fit for Gemm16:
//   kh [span, E], vh [span, Ev] (kv16: set by StageKv);
//   qh [rows, E], doh [rows, Ev] (q16, do16: set by LoadBlock).
// With plan.round16 (FAST) also
//   g16 [rows, key_chunk]: P, then dX, rounded to bf16 (RoundGradOperandRow).
struct BackwardScratch {
  float *kf, *vf, *dk = nullptr, *dv = nullptr;
  float *q, *d_o, *dq;
  float *row_d, *lse;
  float *s, *dp, *dcap;
  uint16_t *kh = nullptr, *vh = nullptr, *qh = nullptr, *doh = nullptr, *g16 = nullptr;
  // Per-worker state passed by const reference with the buffers above.
  mutable bool kv16 = false, q16 = false, do16 = false;
};

BackwardScratch Carve(const BackwardPlan& plan, int64_t d, int64_t dv, void* region) {
  char* at = static_cast<char*>(region);
  auto take = [&at](int64_t floats) {
    float* p = reinterpret_cast<float*>(at);
    at += AlignedFloats(floats);
    return p;
  };
  const int64_t rows = plan.rows();
  BackwardScratch w;
  w.kf = take(plan.span * d);
  w.vf = take(plan.span * dv);
  if (plan.mode != BackwardMode::kPartitioned) {
    w.dk = take(plan.span * d);
    w.dv = take(plan.span * dv);
  }
  w.q = take(std::max(rows * d, dv));
  w.d_o = take(rows * dv);
  w.dq = take(std::max(rows * d, dv));
  w.row_d = take(rows);
  w.lse = take(rows);
  w.s = take(rows * plan.key_chunk);
  w.dp = take(rows * plan.key_chunk);
  w.dcap = plan.softcap ? take(rows * plan.key_chunk) : nullptr;
  if (plan.gemm16 != DType::kF32) {
    auto take16 = [&at](int64_t halves) {
      uint16_t* p = reinterpret_cast<uint16_t*>(at);
      at += AlignedHalves(halves);
      return p;
    };
    w.kh = take16(plan.span * d);
    w.vh = take16(plan.span * dv);
    w.qh = take16(rows * d);
    w.doh = take16(rows * dv);
    if (plan.round16) w.g16 = take16(rows * plan.key_chunk);
  }
  return w;
}

// Everything the items of one call share.
struct Context {
  const AttentionProblem& p;
  const AttentionArgs& a;
  const GradArgs& g;
  const BackwardPlan& plan;
  MaskParams mask;
  int64_t d;   // E: Q, K, dQ, dK
  int64_t dv;  // Ev: V, O, dO, dV
  GemmEngine* engine;
};

// dst [n] = src [n] as `type` (bf16 or f16), for f32 values that are that
// type's values widened (staged rows: exact); true when every product two
// such rows' elements can form is exact on every engine: bf16 dot
// instructions (vdpbf16ps) flush subnormal inputs and products to 0, so a
// bf16 element below 2^-63 in magnitude (other than 0) returns false, and
// the caller multiplies those rows in f32 instead. Two elements of at least
// 2^-63 have a product of at least 2^-126, f32's smallest normal. f16
// values are at least 2^-24 apart from 0: their products never come near.
// (The same instructions also flush a running sum that cancels below
// 2^-126: an error under 2^-126 per sum, which the check cannot exclude.)
bool Narrow16(const float* src, int64_t n, DType type, uint16_t* dst) {
  if (type == DType::kF16) {
    ScaleNarrowRow(src, n, 1.0f, type, dst);  // exact: the values are f16's
    return true;
  }
  return NarrowExactBF16Row(src, n, dst);  // exact: the low halves are 0
}

// A query block: positions [i0, i0 + tokens) of the query heads of kv head g
// (h0 = g * heads), and the keys [k_begin, k_end) any of its rows can see
// through the structured mask and kv_length (KeysOfRows).
struct Block {
  int64_t b, g, h0, i0, tokens, rows, kv_length, k_begin, k_end;
};

// Keys [begin, end) that query rows first..last see through the structured
// mask: visible ranges are monotone in the position. Clamped to kv_length: a
// row past the end of a top-left window has the empty range [i - left, i - left).
KeyRange KeysOfRows(const Context& c, int64_t first, int64_t last, int64_t kv_length) {
  const int64_t begin = std::min(kv_length, VisibleKeys(c.mask, first, kv_length).begin);
  return {begin, std::max(begin, std::min(kv_length, VisibleKeys(c.mask, last, kv_length).end))};
}

Block MakeBlock(const Context& c, int64_t b, int64_t g, int64_t qb) {
  Block k;
  k.b = b;
  k.g = g;
  k.h0 = g * c.plan.heads;
  k.i0 = qb * c.plan.token_block;
  k.tokens = std::min(c.plan.token_block, c.p.q_len - k.i0);
  k.rows = k.tokens * c.plan.heads;
  k.kv_length = c.p.KvLength(b);
  const KeyRange keys = KeysOfRows(c, k.i0, k.i0 + k.tokens - 1, k.kv_length);
  k.k_begin = keys.begin;
  k.k_end = keys.end;
  return k;
}

// dst [d] = row of `t` at element `offset` as f32.
void LoadRow(const TensorView& t, int64_t offset, int64_t d, float* dst) {
  if (t.strides[3] == 1) {
    WidenRow(static_cast<const char*>(t.data) + offset * DTypeSize(t.dtype), t.dtype, d, dst);
  } else {
    for (int64_t c = 0; c < d; ++c) dst[c] = t.LoadF32(offset + c * t.strides[3]);
  }
}

// Row of `t` at `offset` = src [d] rounded to t's dtype; zeros when src is null.
void StoreRow(const TensorView& t, int64_t offset, const float* src, int64_t d) {
  if (t.dtype == DType::kF32 && t.strides[3] == 1) {
    float* out = static_cast<float*>(t.data) + offset;
    if (src == nullptr) {
      std::fill(out, out + d, 0.0f);
    } else {
      std::memcpy(out, src, static_cast<size_t>(d) * sizeof(float));
    }
    return;
  }
  if ((t.dtype == DType::kBF16 || t.dtype == DType::kF16) && t.strides[3] == 1) {
    uint16_t* out = static_cast<uint16_t*>(t.data) + offset;
    if (src == nullptr) {
      std::fill(out, out + d, uint16_t{0});
    } else {
      ScaleNarrowRow(src, d, 1.0f, t.dtype, out);  // StoreFromF32's rounding, bit for bit
    }
    return;
  }
  for (int64_t c = 0; c < d; ++c) {
    StoreFromF32(t.data, t.dtype, offset + c * t.strides[3], src == nullptr ? 0.0f : src[c]);
  }
}

// dbias[b, h, i, j0 : j0 + n) = src [n], or 0 when src is null.
void StoreBiasGrad(const Context& c, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                   const float* src) {
  if (n <= 0) return;
  const TensorView& t = c.g.dbias;
  float* out = static_cast<float*>(t.data) + t.Offset(b, h, i, j0);
  const int64_t stride = t.strides[3];
  for (int64_t j = 0; j < n; ++j) out[j * stride] = src == nullptr ? 0.0f : src[j];
}

// True when the dense mask or a -inf bias blocks pair (b, h, i, j).
bool DenseBlocked(const Context& c, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (c.p.blocked_mask && static_cast<const uint8_t*>(
                              c.a.blocked_mask.data)[c.a.blocked_mask.Offset(b, h, i, j)] != 0) {
    return true;
  }
  return c.p.additive_bias &&
         static_cast<const float*>(c.a.bias.data)[c.a.bias.Offset(b, h, i, j)] == kNegInf;
}

// w.kf [n, E], w.vf [n, Ev] = K and V rows [j0, j0 + n) of (b, g) as f32,
// rows holding a NaN or Inf zeroed (see below); with plan.gemm16 also their
// 16-bit copies w.kh, w.vh and the flag w.kv16.
void StageKv(const Context& c, int64_t b, int64_t g, int64_t j0, int64_t n,
             const BackwardScratch& w) {
  const int64_t d = c.d, dv = c.dv;
  float *kf = w.kf, *vf = w.vf;
  for (int64_t j = j0; j < j0 + n; ++j) {
    float* krow = kf + (j - j0) * d;
    LoadRow(c.a.k, c.a.k.Offset(b, g, j, 0), d, krow);
    float* vrow = vf + (j - j0) * dv;
    LoadRow(c.a.v, c.a.v.Offset(b, g, j, 0), dv, vrow);
    // A K or V row with a NaN or Inf is zeroed: a row that sees it is a NaN
    // row (lse NaN; ProbabilityRow makes its P NaN wherever it sees a key),
    // and a row that does not see it must not get 0 * NaN in dQ = dX K or
    // dP = dO V^T.
    if (!AllFinite(krow, d)) std::fill(krow, krow + d, 0.0f);
    if (!AllFinite(vrow, dv)) std::fill(vrow, vrow + dv, 0.0f);
  }
  if (c.plan.gemm16 != DType::kF32) {
    const bool k_ok = Narrow16(kf, n * d, c.plan.gemm16, w.kh);
    const bool v_ok = Narrow16(vf, n * dv, c.plan.gemm16, w.vh);
    w.kv16 = k_ok && v_ok;
  }
}

// Fills the block's q [rows, E], d_o [rows, Ev], lse and row_d = rowsum(dO O)
// (summed in double: Ev terms), and zeroes dq. A row that sees no key (lse = -inf, or an
// empty range) gets zeros and lse = -inf: its Q may hold anything. With a
// sink such a row's lse is the sink's: its range is not empty, but its Q is
// zeroed when not finite (below) and its P is 0 wherever the masks block.
void LoadBlock(const Context& c, const Block& k, const BackwardScratch& w) {
  const int64_t d = c.d, dv = c.dv;
  for (int64_t r = 0; r < k.rows; ++r) {
    const int64_t h = k.h0 + r % c.plan.heads, i = k.i0 + r / c.plan.heads;
    const float lse = static_cast<const float*>(c.a.lse.data)[c.a.lse.Offset(k.b, h, i)];
    float* q = w.q + r * d;
    float* d_o = w.d_o + r * dv;
    if (VisibleKeys(c.mask, i, k.kv_length).empty() || lse == kNegInf) {
      std::fill(q, q + d, 0.0f);
      std::fill(d_o, d_o + dv, 0.0f);
      w.lse[r] = kNegInf;
      w.row_d[r] = 0.0f;
      continue;
    }
    LoadRow(c.a.q, c.a.q.Offset(k.b, h, i, 0), d, q);
    LoadRow(c.g.d_o, c.g.d_o.Offset(k.b, h, i, 0), dv, d_o);
    // A Q row with a NaN or Inf and a finite lse sees no key (the forward
    // would have made it a NaN row), which with sinks the lse (the sink's)
    // does not say: its Q is never read, and 0 * NaN must not reach dK.
    if (!AllFinite(q, d)) std::fill(q, q + d, 0.0f);
    if (std::isnan(lse)) {
      // A row that read a NaN or Inf: P is NaN wherever it sees a key
      // (ProbabilityRow), 0 where blocked. Q zeroed (0 * NaN must not reach
      // the dK of keys it does not see) and D = 0 (a NaN D would reach its
      // blocked pairs' dS).
      std::fill(q, q + d, 0.0f);
      w.lse[r] = lse;
      w.row_d[r] = 0.0f;
      continue;
    }
    float* o = w.dq;  // dq is free until the first tile: one O row at a time
    LoadRow(c.a.o, c.a.o.Offset(k.b, h, i, 0), dv, o);
    double sum = 0;
    for (int64_t x = 0; x < dv; ++x) sum += static_cast<double>(d_o[x]) * o[x];
    w.lse[r] = lse;
    w.row_d[r] = static_cast<float>(sum);
  }
  std::fill(w.dq, w.dq + k.rows * d, 0.0f);
  if (c.plan.gemm16 != DType::kF32) {  // the rows as the f32 GEMMs would read them
    w.q16 = Narrow16(w.q, k.rows * d, c.plan.gemm16, w.qh);
    w.do16 = Narrow16(w.d_o, k.rows * dv, c.plan.gemm16, w.doh);
  }
}

// Stores the block's dq rows (zeros for rows that see no key) and, with
// dbias, zeros for every pair outside [k_begin, k_end) (the tiles wrote the rest).
void StoreBlock(const Context& c, const Block& k, const BackwardScratch& w) {
  const int64_t d = c.d;
  for (int64_t r = 0; r < k.rows; ++r) {
    const int64_t h = k.h0 + r % c.plan.heads, i = k.i0 + r / c.plan.heads;
    StoreRow(c.g.dq, c.g.dq.Offset(k.b, h, i, 0), w.lse[r] == kNegInf ? nullptr : w.dq + r * d, d);
    if (!c.g.dbias.empty()) {
      StoreBiasGrad(c, k.b, h, i, 0, k.k_begin, nullptr);
      StoreBiasGrad(c, k.b, h, i, k.k_end, c.p.kv_len - k.k_end, nullptr);
    }
  }
}

// Row r's structured range within keys [k0, k0 + kn), as [lo, hi) relative
// to k0, inside [0, kn]; empty for a row that sees no key.
KeyRange ChunkRange(const Context& c, const Block& k, const BackwardScratch& w, int64_t r,
                    int64_t k0, int64_t kn) {
  if (w.lse[r] == kNegInf) return {0, 0};
  const KeyRange vis = VisibleKeys(c.mask, k.i0 + r / c.plan.heads, k.kv_length);
  const int64_t lo = std::min(std::max(vis.begin, k0), k0 + kn) - k0;
  return {lo, std::max(lo, std::min(vis.end, k0 + kn) - k0)};
}

// Row r of S [kn] (scale q.k for keys [k0, k0 + kn)) becomes P = exp(s - lse)
// in place: soft-capped (its derivative kept in `dcap`), biased, and 0 where
// blocked.
void ProbabilityRow(const Context& c, const Block& k, const BackwardScratch& w, int64_t r,
                    int64_t k0, int64_t kn) {
  const AttentionProblem& p = c.p;
  float* x = w.s + r * kn;
  const KeyRange rng = ChunkRange(c, k, w, r, k0, kn);
  std::fill(x, x + rng.begin, 0.0f);
  std::fill(x + rng.end, x + kn, 0.0f);
  if (rng.empty()) return;
  const int64_t h = k.h0 + r % c.plan.heads, i = k.i0 + r / c.plan.heads;
  float* y = x + rng.begin;
  const int64_t n = rng.size();
  if (p.blocked_mask || p.additive_bias) {
    for (int64_t j = 0; j < n; ++j) {
      if (DenseBlocked(c, k.b, h, i, k0 + rng.begin + j)) y[j] = kNegInf;
    }
  }
  if (p.softcap > 0) {
    SoftcapDerivativeRow(y, w.dcap + r * kn + rng.begin, n, p.softcap);  // 0 at -inf
    SoftcapRow(y, n, p.softcap);                                         // keeps -inf
  }
  if (p.additive_bias) {
    const float* bias =
        static_cast<const float*>(c.a.bias.data) + c.a.bias.Offset(k.b, h, i, k0 + rng.begin);
    const int64_t stride = c.a.bias.strides[3];
    for (int64_t j = 0; j < n; ++j) {
      if (y[j] != kNegInf) y[j] += bias[j * stride];
    }
  }
  if (p.alibi) {  // the forward's term (core/alibi.h); a non-finite one: NaN
    const float slope =
        static_cast<const float*>(c.a.alibi_slopes.data)[c.a.alibi_slopes.Offset(h)];
    const int64_t diag = Diagonal(c.mask, i, k.kv_length);
    for (int64_t j = 0; j < n; ++j) {
      if (y[j] == kNegInf) continue;
      const float term = AlibiTerm(slope, diag, k0 + rng.begin + j);
      y[j] = std::isfinite(term) ? y[j] + term : std::numeric_limits<float>::quiet_NaN();
    }
  }
  if (std::isnan(w.lse[r])) {  // a NaN row (LoadBlock)
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] == kNegInf ? 0.0f : w.lse[r];
    return;
  }
  ExpSubtractSum(y, n, w.lse[r]);  // exp(-inf - lse) = 0
}

// Row r of dP [kn] becomes dS = P (dP - D) (written to dbias when asked),
// then dX = dS sech^2(x / c) under softcap, 0 outside the row's range.
void ScoreGradRow(const Context& c, const Block& k, const BackwardScratch& w, int64_t r, int64_t k0,
                  int64_t kn, bool write_dbias) {
  float* g = w.dp + r * kn;
  const KeyRange rng = ChunkRange(c, k, w, r, k0, kn);
  std::fill(g, g + rng.begin, 0.0f);
  std::fill(g + rng.end, g + kn, 0.0f);
  const int64_t n = rng.size();
  if (n > 0) SoftmaxGradRow(w.s + r * kn + rng.begin, g + rng.begin, n, w.row_d[r]);
  if (write_dbias) {
    StoreBiasGrad(c, k.b, k.h0 + r % c.plan.heads, k.i0 + r / c.plan.heads, k0, kn, g);
  }
  if (n > 0 && c.p.softcap > 0) {
    SoftcapGradRow(g + rng.begin, w.dcap + r * kn + rng.begin, n);
  }
}

// Which gradients a tile adds to.
enum TileOutputs { kKeyGrads = 1, kQueryGrads = 2 };

// One tile: the block's rows against keys [k0, k0 + kn), whose f32 K/V rows
// are at row k0 - kv_base of kf/vf (and their accumulators of dk/dv).
void Tile(const Context& c, const Block& k, const BackwardScratch& w, int64_t k0, int64_t kn,
          int64_t kv_base, int outputs) {
  const int64_t d = c.d, dv = c.dv;
  const int R = static_cast<int>(k.rows), N = static_cast<int>(kn), D = static_cast<int>(d),
            Dv = static_cast<int>(dv);
  const float scale = c.p.scale;
  const float* kf = w.kf + (k0 - kv_base) * d;
  const float* vf = w.vf + (k0 - kv_base) * dv;
  GemmEngine& e = *c.engine;
  // S = scale Q K^T and dP = dO V^T: 16-bit operands where the rows allow
  // (Gemm16Type, Narrow16), else f32.
  const DType t16 = c.plan.gemm16;
  if (t16 != DType::kF32 && w.q16 && w.kv16) {
    e.Gemm16(t16, false, true, R, N, D, scale, w.qh, D, w.kh + (k0 - kv_base) * d, D, 0.0f, w.s, N);
  } else {
    e.Sgemm(false, true, R, N, D, scale, w.q, D, kf, D, 0.0f, w.s, N);
  }
  for (int64_t r = 0; r < k.rows; ++r) ProbabilityRow(c, k, w, r, k0, kn);
  const bool key_grads = (outputs & kKeyGrads) != 0;
  const bool query_grads = (outputs & kQueryGrads) != 0;
  float* dv_acc = key_grads ? w.dv + (k0 - kv_base) * dv : nullptr;
  float* dk = key_grads ? w.dk + (k0 - kv_base) * d : nullptr;
  // FAST (plan.round16): P and then dX rounded to bf16 in g16 (a block is
  // dense [R, kn], so one call rounds it all) meet the bf16 copies of dO, Q
  // and K; a copy that holds a tiny value (Narrow16) sends its product to f32.
  const bool round = c.plan.round16;
  // dV [kn, Ev] += P^T dO: a sum over the rows, i.e. over the block's
  // positions and the group's heads.
  if (key_grads && round && w.do16) {
    RoundGradOperandRow(w.s, k.rows * kn, w.g16);
    e.Gemm16(t16, true, false, N, Dv, R, 1.0f, w.g16, N, w.doh, Dv, 1.0f, dv_acc, Dv);
  } else if (key_grads) {
    e.Sgemm(true, false, N, Dv, R, 1.0f, w.s, N, w.d_o, Dv, 1.0f, dv_acc, Dv);
  }
  if (t16 != DType::kF32 && w.do16 && w.kv16) {
    e.Gemm16(t16, false, true, R, N, Dv, 1.0f, w.doh, Dv, w.vh + (k0 - kv_base) * dv, Dv, 0.0f,
             w.dp, N);
  } else {
    e.Sgemm(false, true, R, N, Dv, 1.0f, w.d_o, Dv, vf, Dv, 0.0f, w.dp, N);
  }
  const bool write_dbias = query_grads && !c.g.dbias.empty();
  for (int64_t r = 0; r < k.rows; ++r) ScoreGradRow(c, k, w, r, k0, kn, write_dbias);
  const bool dk16 = key_grads && round && w.q16;
  const bool dq16 = query_grads && round && w.kv16;
  if (dk16 || dq16) RoundGradOperandRow(w.dp, k.rows * kn, w.g16);
  // dK [kn, E] += scale dX^T Q (over the rows, like dV).
  if (dk16) {
    e.Gemm16(t16, true, false, N, D, R, scale, w.g16, N, w.qh, D, 1.0f, dk, D);
  } else if (key_grads) {
    e.Sgemm(true, false, N, D, R, scale, w.dp, N, w.q, D, 1.0f, dk, D);
  }
  // dQ [R, E] += scale dX K.
  if (dq16) {
    e.Gemm16(t16, false, false, R, D, N, scale, w.g16, N, w.kh + (k0 - kv_base) * d, D, 1.0f, w.dq,
             D);
  } else if (query_grads) {
    e.Sgemm(false, false, R, D, N, scale, w.dp, N, kf, D, 1.0f, w.dq, D);
  }
}

// Keys [k_begin, k_end) the query rows of batch entry b see.
KeyRange GroupKeys(const Context& c, int64_t b) {
  return KeysOfRows(c, 0, c.p.q_len - 1, c.p.KvLength(b));
}

// dk, dv rows [j0, j1) of (b, g): the accumulators for [a0, a1) (row a0 at
// accumulator row 0), zeros elsewhere.
void StoreKeyGrads(const Context& c, int64_t b, int64_t g, int64_t j0, int64_t j1, int64_t a0,
                   int64_t a1, const BackwardScratch& w) {
  const int64_t d = c.d, dv = c.dv;
  for (int64_t j = j0; j < j1; ++j) {
    const bool in = j >= a0 && j < a1;
    StoreRow(c.g.dk, c.g.dk.Offset(b, g, j, 0), in ? w.dk + (j - a0) * d : nullptr, d);
    StoreRow(c.g.dv, c.g.dv.Offset(b, g, j, 0), in ? w.dv + (j - a0) * dv : nullptr, dv);
  }
}

// Query blocks first, first + step, ... of (b, g) against every key they
// see, with dQ (and dBias) stored per block and dK, dV of the group's keys
// (GroupKeys, returned) accumulated in w.dk, w.dv from row 0.
KeyRange GroupBlocks(const Context& c, int64_t b, int64_t g, int64_t first, int64_t step,
                     const BackwardScratch& w) {
  const KeyRange keys = GroupKeys(c, b);
  StageKv(c, b, g, keys.begin, keys.size(), w);
  std::fill(w.dk, w.dk + keys.size() * c.d, 0.0f);
  std::fill(w.dv, w.dv + keys.size() * c.dv, 0.0f);
  const int64_t chunk = c.plan.key_chunk;
  for (int64_t qb = first; qb < c.plan.QueryBlocks(c.p); qb += step) {
    const Block k = MakeBlock(c, b, g, qb);
    LoadBlock(c, k, w);
    for (int64_t k0 = k.k_begin; k0 < k.k_end; k0 += chunk) {
      Tile(c, k, w, k0, std::min(chunk, k.k_end - k0), keys.begin, kKeyGrads | kQueryGrads);
    }
    StoreBlock(c, k, w);
  }
  return keys;
}

// kPartitioned: the dK (which 0, [span, E]) or dV (which 1, [span, Ev])
// partial of part `part` of pair (b, g), in the shared region after the
// worker regions.
float* Partial(const Context& c, char* partials, int64_t b, int64_t g, int64_t part, int which) {
  const int64_t slot = ((b * c.p.num_kv_heads + g) * c.plan.parts + part) * 2 + which;
  return reinterpret_cast<float*>(partials +
                                  slot * AlignedFloats(PartialFloats(c.plan.span, c.d, c.dv)));
}

// kPartitioned merge: dk, dv of (b, g) = the sum of its parts' partials,
// part 0 first (a fixed order: the same bits on every call).
void MergeItem(const Context& c, int64_t b, int64_t g, char* partials, const BackwardScratch& w) {
  const KeyRange keys = GroupKeys(c, b);
  float* sum = w.q;  // [max(E, Ev)]
  for (int which = 0; which < 2; ++which) {
    const TensorView& out = which == 0 ? c.g.dk : c.g.dv;
    const int64_t d = which == 0 ? c.d : c.dv;
    for (int64_t j = 0; j < c.p.kv_len; ++j) {
      const bool in = j >= keys.begin && j < keys.end;
      if (in) {
        const int64_t row = (j - keys.begin) * d;
        std::copy_n(Partial(c, partials, b, g, 0, which) + row, d, sum);
        for (int64_t part = 1; part < c.plan.parts; ++part) {
          const float* x = Partial(c, partials, b, g, part, which) + row;
          for (int64_t e = 0; e < d; ++e) sum[e] += x[e];
        }
      }
      StoreRow(out, out.Offset(b, g, j, 0), in ? sum : nullptr, d);
    }
  }
}

// Split item: dK and dV of keys [s * span, (s + 1) * span) of (b, g), over
// every query block that sees some of them.
void KeySpanItem(const Context& c, int64_t b, int64_t g, int64_t s, const BackwardScratch& w) {
  const int64_t j0 = s * c.plan.span, j1 = std::min(c.p.kv_len, j0 + c.plan.span);
  const KeyRange group = GroupKeys(c, b);
  const int64_t a0 = std::max(j0, group.begin), a1 = std::max(a0, std::min(j1, group.end));
  if (a1 > a0) {
    StageKv(c, b, g, a0, a1 - a0, w);
    std::fill(w.dk, w.dk + (a1 - a0) * c.d, 0.0f);
    std::fill(w.dv, w.dv + (a1 - a0) * c.dv, 0.0f);
    const int64_t chunk = c.plan.key_chunk;
    for (int64_t qb = 0; qb < c.plan.QueryBlocks(c.p); ++qb) {
      const Block k = MakeBlock(c, b, g, qb);
      const int64_t lo = std::max(k.k_begin, a0), hi = std::min(k.k_end, a1);
      if (hi <= lo) continue;
      LoadBlock(c, k, w);
      for (int64_t k0 = lo; k0 < hi; k0 += chunk) {
        Tile(c, k, w, k0, std::min(chunk, hi - k0), a0, kKeyGrads);
      }
    }
  }
  StoreKeyGrads(c, b, g, j0, j1, a0, a1, w);
}

// Split item: dQ (and dBias) of query block qb of (b, g); each key chunk is
// staged on its own.
void QueryBlockItem(const Context& c, int64_t b, int64_t g, int64_t qb, const BackwardScratch& w) {
  const Block k = MakeBlock(c, b, g, qb);
  LoadBlock(c, k, w);
  const int64_t chunk = c.plan.key_chunk;
  for (int64_t k0 = k.k_begin; k0 < k.k_end; k0 += chunk) {
    const int64_t kn = std::min(chunk, k.k_end - k0);
    StageKv(c, b, g, k0, kn, w);
    Tile(c, k, w, k0, kn, k0, kQueryGrads);
  }
  StoreBlock(c, k, w);
}

}  // namespace

int64_t BackwardPlan::NumItems(const AttentionProblem& p, int phase) const {
  const int64_t pairs = p.batch * p.num_kv_heads;
  switch (mode) {
    case BackwardMode::kFused:
      return phase == 0 ? pairs : 0;
    case BackwardMode::kPartitioned:
      return phase == 0 ? pairs * parts : pairs;
    default:
      return phase == 0 ? pairs * (KeySpans(p) + QueryBlocks(p)) : 0;
  }
}

absl::StatusOr<BackwardPlan> MakeBackwardPlan(const AttentionProblem& p, const BackwardOptions& o) {
  BackwardPlan plan;
  plan.workers = std::max(1, o.workers);
  plan.heads = p.group_size();
  plan.softcap = p.softcap > 0;
  const int64_t d = p.head_dim, dv = p.value_dim();
  plan.token_block = std::min(p.q_len, std::max<int64_t>(1, o.target_rows / plan.heads));
  plan.key_chunk = std::min(p.kv_len, std::max<int64_t>(1, o.key_chunk));
  plan.span = p.kv_len;
  const size_t workers = static_cast<size_t>(plan.workers);
  plan.gemm16 = o.gemm16;
  plan.round16 = o.round16 && o.gemm16 == DType::kBF16;
  auto worker_bytes = [&](bool accumulators) {
    return BackwardWorkerBytes(plan.span, plan.rows(), plan.key_chunk, d, dv, plan.softcap,
                               accumulators, plan.gemm16 != DType::kF32, plan.round16);
  };
  auto finish = [&](BackwardMode mode) {
    plan.mode = mode;
    plan.worker_bytes = worker_bytes(mode != BackwardMode::kPartitioned);
    return plan;
  };
  const int64_t pairs = p.batch * p.num_kv_heads;
  if (pairs >= plan.workers) {
    if (worker_bytes(true) * workers <= o.budget_bytes) return finish(BackwardMode::kFused);
  } else {
    // Fewer pairs than workers: each pair's query blocks are dealt
    // round-robin to ceil(workers / pairs) parts (interleaved, so that the
    // parts see about as many causal keys).
    plan.parts = std::min(plan.QueryBlocks(p), CeilDiv(plan.workers, pairs));
    plan.partial_bytes = static_cast<size_t>(pairs * plan.parts * 2) *
                         AlignedFloats(PartialFloats(plan.span, d, dv));
    if (plan.parts >= 2 && plan.partial_bytes <= o.budget_bytes &&
        worker_bytes(false) * workers <= o.budget_bytes - plan.partial_bytes) {
      return finish(BackwardMode::kPartitioned);
    }
    plan.parts = 1;
    plan.partial_bytes = 0;
    // Key spans, about two per worker (so the causal imbalance evens out).
    plan.span = CeilDiv(p.kv_len, CeilDiv(2 * plan.workers, pairs));
    plan.key_chunk = std::min(plan.key_chunk, plan.span);
  }
  const size_t per_worker = o.budget_bytes / workers;
  while (worker_bytes(true) > per_worker) {
    if (plan.span > plan.key_chunk) {
      plan.span = std::max(plan.key_chunk, CeilDiv(plan.span, 2));
    } else if (plan.key_chunk > kMinKeyChunk) {
      plan.key_chunk = std::max(kMinKeyChunk, CeilDiv(plan.key_chunk, 2));
      plan.span = plan.key_chunk;
    } else if (plan.token_block > 1) {
      plan.token_block = CeilDiv(plan.token_block, 2);
    } else {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "memory budget %d bytes over %d workers cannot hold the backward of one position of "
          "%d query heads against a %d-key chunk at head_dim %d (needs %d bytes per worker)",
          o.budget_bytes, plan.workers, plan.heads, plan.key_chunk, d, worker_bytes(true)));
    }
  }
  plan.span = std::max(plan.span, plan.key_chunk);  // a query item stages one chunk in kf/vf
  return finish(BackwardMode::kSplit);
}

DType Gemm16Type(const AttentionProblem& p, const GemmEngine& engine) {
  const DType t = p.dtype;
  if ((t != DType::kBF16 && t != DType::kF16) || p.kv_dtype != t || !engine.HasGemm16(t)) {
    return DType::kF32;
  }
  return t;
}

bool RoundsGradOperands(const AttentionProblem& p, const GemmEngine& engine) {
  return FastRoundsGradOperands(p) && Gemm16Type(p, engine) == DType::kBF16;
}

std::string DescribeBackwardPlan(const BackwardPlan& plan) {
  const char* mode = plan.mode == BackwardMode::kFused         ? "fused"
                     : plan.mode == BackwardMode::kPartitioned ? "partitioned"
                                                               : "split";
  std::string products;
  if (plan.round16) {
    products = absl::StrCat(" s,dp,dv,dk,dq=", DTypeName(plan.gemm16));
  } else if (plan.gemm16 != DType::kF32) {
    products = absl::StrCat(" s,dp=", DTypeName(plan.gemm16));
  }
  return absl::StrFormat("%s rows %dx%d keys<=%d span %d parts %d%s", mode, plan.heads,
                         plan.token_block, plan.key_chunk, plan.span, plan.parts, products);
}

void ComputeBackwardItem(const AttentionProblem& p, const AttentionArgs& args,
                         const GradArgs& grads, const BackwardPlan& plan, int phase, int64_t item,
                         GemmEngine* engine, void* workspace, int worker) {
  const Context c{p, args, grads, plan, p.mask_params(), p.head_dim, p.value_dim(), engine};
  char* base = static_cast<char*>(workspace);
  char* partials = base + plan.worker_bytes * static_cast<size_t>(plan.workers);
  BackwardScratch w = Carve(plan, p.head_dim, p.value_dim(), base + plan.worker_bytes * worker);
  const int64_t G = p.num_kv_heads;
  switch (plan.mode) {
    case BackwardMode::kFused: {
      const int64_t b = item / G, g = item % G;
      const KeyRange keys = GroupBlocks(c, b, g, 0, 1, w);
      StoreKeyGrads(c, b, g, 0, p.kv_len, keys.begin, keys.end, w);
      return;
    }
    case BackwardMode::kPartitioned: {
      if (phase == 1) {
        MergeItem(c, item / G, item % G, partials, w);
        return;
      }
      const int64_t pair = item / plan.parts, part = item % plan.parts;
      w.dk = Partial(c, partials, pair / G, pair % G, part, 0);
      w.dv = Partial(c, partials, pair / G, pair % G, part, 1);
      GroupBlocks(c, pair / G, pair % G, part, plan.parts, w);
      return;
    }
    case BackwardMode::kSplit:
      break;
  }
  const int64_t spans = plan.KeySpans(p), blocks = plan.QueryBlocks(p);
  const int64_t span_items = p.batch * G * spans;
  if (item < span_items) {
    const int64_t pair = item / spans;
    KeySpanItem(c, pair / G, pair % G, item % spans, w);
    return;
  }
  item -= span_items;
  const int64_t pair = item / blocks;
  // Last blocks first: under a causal mask they see the most keys.
  QueryBlockItem(c, pair / G, pair % G, blocks - 1 - item % blocks, w);
}

}  // namespace blas
}  // namespace attnkit

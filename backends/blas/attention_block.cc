#include "backends/blas/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/blas/row_ops.h"
#include "core/alibi.h"
#include "core/dtype.h"
#include "core/fast_compute.h"
#include "core/sinks.h"

namespace attnkit {
namespace blas {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A [rows, d] f32 operand: pointer and leading dimension.
struct Operand {
  const float* data;
  int64_t ld;
};

// One K or V row of d elements at element `offset` of `t` into out [d] as
// f32: 16-bit storage widened exactly, int8 and fp8 times the row's `scale`.
void StageRow(const TensorView& t, int64_t offset, float scale, int64_t d, float* out) {
  const int64_t stride = t.strides[3];
  if (IsFp8(t.dtype)) {  // decoded exactly, then one rounding of the scale's product
    if (stride == 1) {
      WidenRow(static_cast<const uint8_t*>(t.data) + offset, t.dtype, d, out);
    } else {
      for (int64_t c = 0; c < d; ++c) out[c] = t.LoadF32(offset + c * stride);
    }
    ScaleRow(out, d, scale);
  } else if (t.dtype == DType::kI8) {
    const int8_t* src = static_cast<const int8_t*>(t.data) + offset;
    if (stride == 1) {
      DequantizeRow(src, d, scale, out);
    } else {
      for (int64_t c = 0; c < d; ++c) out[c] = static_cast<float>(src[c * stride]) * scale;
    }
  } else if (stride == 1) {  // vectorised, exact
    WidenRow(static_cast<const char*>(t.data) + offset * DTypeSize(t.dtype), t.dtype, d, out);
  } else {
    for (int64_t c = 0; c < d; ++c) out[c] = t.LoadF32(offset + c * stride);
  }
}

// Calls fn(r, offset, scale) for K or V rows [j0, j0 + n) of head (b, g),
// r = 0 .. n-1: the row's element offset in `t` and, for int8, its scale
// from `scale` (else 1). Rows are found through ctx.kv_rows a run at a time
// (one page, or all of a dense tensor), so a paged pool and its dense layout
// visit the same values in the same order.
template <typename Fn>
void ForEachKvRow(const BlockContext& ctx, const TensorView& t, const TensorView& scale, int64_t b,
                  int64_t g, int64_t j0, int64_t n, Fn fn) {
  const KvRows& rows = ctx.kv_rows;
  const bool int8 = IsScaledKv(t.dtype);  // int8 or fp8: a scale per row
  const int64_t row_stride = KvRows::RowStride(t, rows.paged());
  const int64_t scale_stride = int8 ? KvRows::RowStride(scale, rows.paged()) : 0;
  const float* scales = int8 ? static_cast<const float*>(scale.data) : nullptr;
  for (int64_t j = j0; j < j0 + n;) {
    const int64_t run = std::min(rows.RunLength(j), j0 + n - j);
    const int64_t first = rows.Offset(t, b, g, j);
    const int64_t first_scale = int8 ? rows.ScaleOffset(scale, b, g, j) : 0;
    for (int64_t r = 0; r < run; ++r, ++j) {
      fn(j - j0, first + r * row_stride, int8 ? scales[first_scale + r * scale_stride] : 1.0f);
    }
  }
}

// Copies K or V rows [j0, j0 + n) of head (b, g) to dst [n, d] as f32 (the
// staged chunk, see StagesKv); `scale` is k_scale or v_scale for int8 K/V.
// A paged pool and its dense layout stage the same values into the same
// places (ForEachKvRow), and the GEMMs that follow give the same bits.
void StageRows(const BlockContext& ctx, const TensorView& t, const TensorView& scale, int64_t b,
               int64_t g, int64_t j0, int64_t n, float* dst) {
  const int64_t d = t.shape[t.rank - 1];  // E for K, Ev for V
  ForEachKvRow(ctx, t, scale, b, g, j0, n,
               [&](int64_t r, int64_t offset, float s) { StageRow(t, offset, s, d, dst + r * d); });
}

// A product operand in its own type: `ld` elements of that type between rows.
struct RawOperand {
  const void* data;
  int64_t ld;
};

// K or V rows [j0, j0 + n) of head (b, g) in their storage type (16-bit or
// int8 bits as stored): in place when the tensor is dense with unit stride
// along d (rows ld = strides[2] apart), else gathered a run at a time into
// dst [n, d]. For int8, scales[0, n) receives the rows' scales from `scale`.
RawOperand StoredRows(const BlockContext& ctx, const TensorView& t, const TensorView& scale,
                      int64_t b, int64_t g, int64_t j0, int64_t n, void* dst, float* scales) {
  const int64_t d = t.shape[t.rank - 1];  // E for K, Ev for V
  const size_t size = DTypeSize(t.dtype);
  const int64_t stride = t.strides[3];
  const bool in_place = !ctx.kv_rows.paged() && stride == 1;
  if (!in_place || scales != nullptr) {  // rows to gather, or int8 scales
    char* out = static_cast<char*>(dst);
    ForEachKvRow(ctx, t, scale, b, g, j0, n, [&](int64_t r, int64_t offset, float s) {
      if (scales != nullptr) scales[r] = s;
      if (in_place) return;
      const char* src = static_cast<const char*>(t.data) + offset * size;
      char* row = out + r * d * size;
      if (stride == 1) {
        std::memcpy(row, src, static_cast<size_t>(d) * size);
      } else {
        for (int64_t c = 0; c < d; ++c) std::memcpy(row + c * size, src + c * stride * size, size);
      }
    });
  }
  if (in_place) {
    return {static_cast<const char*>(t.data) + t.Offset(b, g, j0, 0) * size, t.strides[2]};
  }
  return {dst, d};
}

// The block's query rows as the Q.K product's operand (ctx.qk_type is not
// kF32), stacked position-major into scratch like QueryRows: 16-bit values
// as stored, or as FAST rounds them (RoundQueryValue, the values the
// reference consumes); int8: each row quantized (QuantizeQueryRow) with
// p.scale times its scale in w.q_scale (o is free then and holds the f32
// row on the way).
RawOperand LowPrecisionQueryRows(const BlockContext& ctx, const BlockCoords& c,
                                 const WorkerScratch& w) {
  const TensorView& q = ctx.args->q;
  const int64_t d = ctx.problem->head_dim;
  const DType type = ctx.qk_type;
  for (int64_t t = 0; t < c.num_tokens; ++t) {
    for (int64_t hh = 0; hh < c.num_heads; ++hh) {
      const int64_t r = t * c.num_heads + hh;
      const int64_t src = q.Offset(c.b, c.h0 + hh, c.i0 + t, 0);
      const int64_t stride = q.strides[3];
      if (type == DType::kI8) {
        float* row = w.o + r * d;
        for (int64_t k = 0; k < d; ++k) row[k] = q.LoadF32(src + k * stride);
        w.q_scale[r] =
            ctx.problem->scale * QuantizeQueryRow(row, d, reinterpret_cast<int8_t*>(w.q) + r * d);
        continue;
      }
      uint16_t* dst = reinterpret_cast<uint16_t*>(w.q) + r * d;
      if (q.dtype == type && stride == 1) {
        std::memcpy(dst, static_cast<const uint16_t*>(q.data) + src, d * sizeof(uint16_t));
        continue;
      }
      for (int64_t k = 0; k < d; ++k) {  // rounded once, then stored exactly
        StoreFromF32(dst, type, k, RoundQueryValue(q.LoadF32(src + k * stride), type));
      }
    }
  }
  return {w.q, d};
}

// The block's query rows, stacked position-major: row r is position
// i0 + r / heads of head h0 + r % heads, so the rows of a run of positions are
// contiguous (see the diagonal panels in ComputeBlock). In place when they
// form one strided matrix.
Operand QueryRows(const BlockContext& ctx, const BlockCoords& c, float* scratch) {
  const TensorView& q = ctx.args->q;
  const int64_t d = ctx.problem->head_dim;
  const float* base = static_cast<const float*>(q.data) + q.Offset(c.b, c.h0, c.i0, 0);
  if (ctx.q_in_place) {
    if (c.num_tokens == 1 && c.num_heads == 1) return {base, d};
    if (c.num_heads == 1 && q.strides[2] >= d) return {base, q.strides[2]};
    if (c.num_tokens == 1 && q.strides[1] >= d) return {base, q.strides[1]};
  }
  float* dst = scratch;
  for (int64_t t = 0; t < c.num_tokens; ++t) {
    for (int64_t hh = 0; hh < c.num_heads; ++hh, dst += d) {
      const int64_t src = q.Offset(c.b, c.h0 + hh, c.i0 + t, 0);
      if (ctx.q_in_place) {
        std::memcpy(dst, static_cast<const float*>(q.data) + src, d * sizeof(float));
      } else {
        for (int64_t k = 0; k < d; ++k) dst[k] = q.LoadF32(src + k * q.strides[3]);
      }
    }
  }
  return {scratch, d};
}

// Turns row `s` [kn] of scores for keys [k0, k0 + kn) into unnormalised
// probabilities exp(s - running max), updating the row's running max and sum
// and rescaling its output accumulator `o` [d] when the max grows. Keys the
// row cannot see get probability 0: outside the structured mask, blocked by
// the dense mask, or with a bias of -inf. A raw score of a visible pair that
// is NaN or Inf (a NaN or Inf in Q or K), a NaN or +inf bias, or a
// non-finite ALiBi term sets *row_bad (oracle/reference.h: the row's output
// becomes NaN). The bias and the ALiBi term (core/alibi.h) are added after
// the softcap.
void SoftmaxChunkRow(const BlockContext& ctx, int64_t b, int64_t h, int64_t i, int64_t kv_length,
                     int64_t k0, int64_t kn, float* s, float* o, float* row_max, float* row_sum,
                     float* row_bad) {
  const AttentionProblem& p = *ctx.problem;
  const AttentionArgs& a = *ctx.args;
  const KeyRange vis = VisibleKeys(ctx.mask, i, kv_length);
  const int64_t lo = std::max(vis.begin, k0) - k0;
  const int64_t hi = std::min(std::min(vis.end, kv_length), k0 + kn) - k0;
  if (hi <= lo) {
    std::fill(s, s + kn, 0.0f);
    return;
  }
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi, s + kn, 0.0f);
  float* x = s + lo;
  const int64_t n = hi - lo;
  const float* bias = nullptr;
  int64_t bias_stride = 0;
  if (p.additive_bias) {
    bias = static_cast<const float*>(a.bias.data) + a.bias.Offset(b, h, i, k0 + lo);
    bias_stride = a.bias.strides[3];
  }
  const uint8_t* blocked = nullptr;
  int64_t blocked_stride = 0;
  if (p.blocked_mask) {
    blocked =
        static_cast<const uint8_t*>(a.blocked_mask.data) + a.blocked_mask.Offset(b, h, i, k0 + lo);
    blocked_stride = a.blocked_mask.strides[3];
  }
  // Nothing changes a plain row's scores between the finite check and the
  // max: both in one pass (RowMaxFinite, below).
  const bool plain = bias == nullptr && blocked == nullptr && !(p.softcap > 0) && !p.alibi;
  bool bad = false;
  if (bias != nullptr || blocked != nullptr) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const float bj = bias != nullptr ? bias[j * bias_stride] : 0.0f;
      if ((blocked != nullptr && blocked[j * blocked_stride] != 0) || bj == -kInf) {
        x[j] = kNegInf;
        continue;
      }
      bad = bad || !std::isfinite(x[j]) || !(bj < kInf);
    }
  } else if (!plain) {
    bad = !AllFinite(x, n);
  }
  if (p.softcap > 0) SoftcapRow(x, n, p.softcap);  // keeps -inf
  if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      if (x[j] != kNegInf) x[j] += bias[j * bias_stride];
    }
  }
  if (p.alibi) {
    const float slope = static_cast<const float*>(a.alibi_slopes.data)[a.alibi_slopes.Offset(h)];
    const int64_t diag = Diagonal(ctx.mask, i, kv_length);
    const int64_t first = k0 + lo;  // x[0]'s key
    // Vector code when every term of the row is finite and the distances
    // exact in f32; scalar (AlibiTerm, with the NaN rule) otherwise.
    const int64_t far = std::max(std::llabs(diag - first), std::llabs(diag - (first + n)));
    if (AlibiTermsAreFinite(slope, far)) {
      AddAlibiRow(x, n, slope, static_cast<float>(diag - first));
    } else {
      for (int64_t j = 0; j < n; ++j) {
        if (x[j] == kNegInf) continue;  // blocked: the term is never read
        const float term = AlibiTerm(slope, diag, first + j);
        bad = bad || !std::isfinite(term);
        x[j] += term;
      }
    }
  }
  float chunk_max;
  if (plain) {
    bool finite = true;
    chunk_max = RowMaxFinite(x, n, &finite);
    bad = !finite;
  } else {
    chunk_max = RowMax(x, n);
  }
  if (bad) *row_bad = 1.0f;
  if (chunk_max == kNegInf) {  // every visible key here is blocked
    std::fill(x, x + n, 0.0f);
    return;
  }
  const float old_max = *row_max;
  const float new_max = std::max(old_max, chunk_max);
  if (old_max != kNegInf && new_max > old_max) {
    // An earlier chunk contributed: rescale its sum and output to the new max.
    const float f = std::exp(old_max - new_max);
    *row_sum *= f;
    ScaleRow(o, p.value_dim(), f);
  }
  *row_max = new_max;
  *row_sum += ExpSubtractSum(x, n, new_max);
}

// o = acc / sum and lse = max + log(sum) for one row; zeros and -inf when the
// row saw no key; NaN and NaN when it read a NaN or Inf (`bad`, or a V row's
// in its accumulator). The head's sink, if any, is folded in (core/sinks.h).
// acc [Ev] is scratch and may be overwritten.
void StoreRow(const BlockContext& ctx, int64_t b, int64_t h, int64_t i, float* acc, float max,
              float sum, bool bad) {
  const AttentionArgs& a = *ctx.args;
  const int64_t d = ctx.problem->value_dim();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float sink =
      ctx.problem->sinks ? static_cast<const float*>(a.sinks.data)[a.sinks.Offset(h)] : kNegInf;
  // acc holds a product only when the row saw a key (sum > 0). A NaN or +inf
  // sink makes the row NaN too (core/sinks.h).
  const bool poisoned = bad || (sum > 0 && !AllFinite(acc, d)) || std::isnan(sink) ||
                        sink == std::numeric_limits<float>::infinity();
  if (poisoned) std::fill(acc, acc + d, nan);
  const bool blocked = !poisoned && !(sum > 0);
  float inv = nan, lse = nan;  // as when poisoned
  if (blocked) {
    inv = 0.0f;
    lse = sink;  // -inf without a sink
  } else if (!poisoned && ctx.problem->sinks) {
    const SinkNorm norm = NormalizeWithSink(max, sum, sink);  // the sink joins the sum
    inv = norm.inv;
    lse = norm.lse;
  } else if (!poisoned) {
    inv = 1.0f / sum;
    if (ctx.problem->return_lse) lse = max + std::log(sum);
  }
  const int64_t base = a.o.Offset(b, h, i, 0);
  const int64_t stride = a.o.strides[3];
  if (a.o.dtype == DType::kF32 && stride == 1) {
    float* out = static_cast<float*>(a.o.data) + base;
    if (blocked) {
      std::fill(out, out + d, 0.0f);
    } else {
      ScaleRow(acc, d, inv);  // vectorised in scratch, then one copy out
      std::memcpy(out, acc, static_cast<size_t>(d) * sizeof(float));
    }
  } else if ((a.o.dtype == DType::kBF16 || a.o.dtype == DType::kF16) && stride == 1 && !blocked) {
    // A scalar loop here was a tenth of an all-bf16 prefill on oneDNN.
    ScaleNarrowRow(acc, d, inv, a.o.dtype, static_cast<uint16_t*>(a.o.data) + base);
  } else {
    for (int64_t c = 0; c < d; ++c) {
      StoreFromF32(a.o.data, a.o.dtype, base + c * stride, blocked ? 0.0f : acc[c] * inv);
    }
  }
  if (ctx.problem->return_lse) static_cast<float*>(a.lse.data)[a.lse.Offset(b, h, i)] = lse;
}

// Whether K/V is bf16 or f16 and `engine` multiplies that type as stored.
bool Gemm16OfKvType(const AttentionProblem& p, const GemmEngine& engine) {
  const DType kv = p.kv_dtype;
  return (kv == DType::kBF16 || kv == DType::kF16) && engine.HasGemm16(kv);
}

}  // namespace

void ChooseOperandTypes(BlockContext* ctx) {
  const AttentionProblem& p = *ctx->problem;
  const GemmEngine& e = *ctx->engine;
  ctx->qk_type = ctx->pv_type = DType::kF32;
  const DType kv = p.kv_dtype;
  if (kv == DType::kI8) {
    if (p.fast() && e.HasInt8Dot()) ctx->qk_type = DType::kI8;
    // u8 weights times V as stored, or V dequantized and an f32 P.V.
    if (TakesU8Weights(p, e)) ctx->pv_type = DType::kI8;
    return;
  }
  if (MultipliesQK16(p, e)) ctx->qk_type = kv;
  if (p.fast() && Gemm16OfKvType(p, e)) ctx->pv_type = kv;
}

bool MultipliesQK16(const AttentionProblem& p, const GemmEngine& engine) {
  return Gemm16OfKvType(p, engine) && (p.dtype == p.kv_dtype || p.fast());
}

bool TakesU8Weights(const AttentionProblem& p, const GemmEngine& engine) {
  return FastQuantizesWeights(p) && engine.HasU8S8Dot();
}

std::vector<DType> FastKvTypes(const GemmEngine& engine) {
  std::vector<DType> types;
  for (DType t : {DType::kF16, DType::kBF16}) {
    if (engine.HasGemm16(t)) types.push_back(t);
  }
  if (engine.HasInt8Dot()) types.push_back(DType::kI8);
  return types;
}

bool BlasCompatible(const TensorView& t, int64_t head_dim) {
  return t.dtype == DType::kF32 && t.strides[3] == 1 && t.strides[2] >= head_dim;
}

bool StagesKv(const AttentionProblem& p, const AttentionArgs* args) {
  if (p.is_paged() || p.kv_dtype != DType::kF32) return true;
  return args != nullptr &&
         (!BlasCompatible(args->k, p.head_dim) || !BlasCompatible(args->v, p.value_dim()));
}

BlockCoords DecodeItem(const AttentionProblem& p, const BlockPlan& plan, int64_t item) {
  const int64_t head_blocks = CeilDiv(p.group_size(), plan.head_block);
  const int64_t token_blocks = CeilDiv(p.q_len, plan.token_block);
  BlockCoords c;
  const int64_t hb = item % head_blocks;
  item /= head_blocks;
  c.g = item % p.num_kv_heads;
  item /= p.num_kv_heads;
  c.b = item % p.batch;
  const int64_t tb = token_blocks - 1 - item / p.batch;
  const int64_t first_in_group = hb * plan.head_block;
  c.h0 = c.g * p.group_size() + first_in_group;
  c.num_heads = std::min(plan.head_block, p.group_size() - first_in_group);
  c.i0 = tb * plan.token_block;
  c.num_tokens = std::min(plan.token_block, p.q_len - c.i0);
  return c;
}

namespace {

// True when query row (b, h, i) sees key j: inside the structured mask and
// kv_length, not blocked by the dense mask, bias not -inf.
bool PairVisible(const BlockContext& ctx, int64_t b, int64_t h, int64_t i, int64_t j,
                 int64_t kv_length) {
  const AttentionProblem& p = *ctx.problem;
  const AttentionArgs& a = *ctx.args;
  const KeyRange vis = VisibleKeys(ctx.mask, i, kv_length);
  if (j < vis.begin || j >= std::min(vis.end, kv_length)) return false;
  if (p.blocked_mask &&
      static_cast<const uint8_t*>(a.blocked_mask.data)[a.blocked_mask.Offset(b, h, i, j)] != 0) {
    return false;
  }
  return !(p.additive_bias &&
           static_cast<const float*>(a.bias.data)[a.bias.Offset(b, h, i, j)] == kNegInf);
}

// True when every row of block rows [r0, r0 + n) sees every key of
// [k0, k0 + kn) (so a NaN or Inf in a V row there reaches, and belongs to,
// every row's output). Visible ranges are monotone in the position.
bool ChunkSeenByAllRows(const BlockContext& ctx, const BlockCoords& c, int64_t r0, int64_t n,
                        int64_t k0, int64_t kn, int64_t kv_length) {
  const AttentionProblem& p = *ctx.problem;
  if (p.blocked_mask || p.additive_bias) return false;
  const KeyRange first = VisibleKeys(ctx.mask, c.i0 + r0 / c.num_heads, kv_length);
  const KeyRange last = VisibleKeys(ctx.mask, c.i0 + (r0 + n - 1) / c.num_heads, kv_length);
  return last.begin <= k0 && std::min(first.end, kv_length) >= k0 + kn;
}

}  // namespace

namespace {

// FAST's P.V for int8 V with P times V's row scales quantized to u8
// (core/fast_compute.h FastQuantizesWeights), in blocks of kFastWeightBlock
// keys from the chunk's start. Block x's u8 weights [n, its keys] lie at
// pw + x * n * kBlock (QuantizeRowWeights, row by row); the chunk's P.V is
// then one exact integer product of them with V's rows as stored, one batch
// entry a block (GemmEngine::U8S8DotBatch), each block's sums times its back
// scale added into O (U8BlocksTimesV).
constexpr int64_t kBlock = kFastWeightBlock;

// Row r of n's weights: P's row times V's row scales (w.v_scale), quantized
// per block. False when a block is refused (a NaN, Inf or negative weight,
// or a tiny largest one): the chunk then takes the f32 product.
bool QuantizeRowWeights(const float* p_row, int64_t r, int64_t n, int64_t kn,
                        const WorkerScratch& w) {
  const int64_t full = kn / kBlock, tail = kn % kBlock;
  return QuantizeWeightsRowU8(p_row, w.v_scale, kn, w.pw + r * kBlock, n * kBlock,
                              w.pw + full * n * kBlock + r * tail,
                              w.pw_scale + r * CeilDiv(kn, kBlock));
}

// O [n, Ev] (+)= P [n, kn] . V [kn, Ev] (`first` overwrites O) for rows
// [r0, r0 + n) from their quantized weights and V's int8 rows `v`.
void U8BlocksTimesV(const BlockContext& ctx, const RawOperand& v, int64_t r0, int64_t n, int64_t kn,
                    bool first, const WorkerScratch& w) {
  const int64_t dv = ctx.problem->value_dim();
  const int64_t full = kn / kBlock, tail = kn % kBlock, blocks = CeilDiv(kn, kBlock);
  float* o = w.o + r0 * dv;
  if (first) std::fill(o, o + n * dv, 0.0f);
  const int8_t* v8 = static_cast<const int8_t*>(v.data);
  // Blocks [x0, x0 + count) of `len` keys each, their sums in pv_sums.
  auto add_blocks = [&](int64_t x0, int64_t count, int64_t len) {
    ctx.engine->U8S8DotBatch(count, n, dv, len, w.pw + x0 * n * kBlock, v8 + x0 * kBlock * v.ld,
                             v.ld, kBlock * v.ld, w.pv_sums);
    for (int64_t x = 0; x < count; ++x) {
      for (int64_t r = 0; r < n; ++r) {
        AccumulateIntRow(w.pv_sums + (x * n + r) * dv, dv, w.pw_scale[r * blocks + x0 + x],
                         o + r * dv);
      }
    }
  };
  const int64_t batch = std::max<int64_t>(1, U8SumInts(ctx.plan.rows(), dv) / (n * dv));
  for (int64_t x0 = 0; x0 < full; x0 += batch) add_blocks(x0, std::min(batch, full - x0), kBlock);
  if (tail > 0) add_blocks(full, 1, tail);
}

// Rows [r0, r0 + n) of block `c` (position-major) against keys [k0, k0 + kn):
//   S [n, kn] = scale * Q [n, E] . K [kn, E]^T, online softmax per row,
//   O [n, Ev] (+)= P [n, kn] . V [kn, Ev]; `first` overwrites O instead.
void RowsAgainstKeys(const BlockContext& ctx, const BlockCoords& c, const RawOperand& q, int64_t r0,
                     int64_t n, int64_t k0, int64_t kn, bool first, const WorkerScratch& w) {
  const AttentionProblem& p = *ctx.problem;
  const AttentionArgs& a = *ctx.args;
  const int64_t d = p.head_dim, dv = p.value_dim();
  const int64_t kv_length = p.KvLength(c.b);
  GemmEngine& e = *ctx.engine;
  Operand v{w.v, dv};
  if (ctx.qk_type == DType::kI8) {  // exact int32 sums, then each row's and key's factor
    const RawOperand k = StoredRows(ctx, a.k, a.k_scale, c.b, c.g, k0, kn, w.k, w.k_scale);
    int32_t* sums = reinterpret_cast<int32_t*>(w.s);
    e.Int8DotTransB(n, kn, d, static_cast<const int8_t*>(q.data) + r0 * q.ld, q.ld,
                    static_cast<const int8_t*>(k.data), k.ld, sums, kn);
    for (int64_t r = 0; r < n; ++r) {
      ScaleIntRow(sums + r * kn, kn, w.q_scale[r0 + r], w.k_scale, w.s + r * kn);
    }
  } else if (ctx.qk_type != DType::kF32) {
    const RawOperand k = StoredRows(ctx, a.k, a.k_scale, c.b, c.g, k0, kn, w.k, nullptr);
    e.Gemm16(ctx.qk_type, false, true, n, kn, d, p.scale,
             static_cast<const uint16_t*>(q.data) + r0 * q.ld, q.ld,
             static_cast<const uint16_t*>(k.data), k.ld, 0.0f, w.s, kn);
  } else {
    Operand k{w.k, d};
    if (ctx.plan.stage_kv) {
      StageRows(ctx, a.k, a.k_scale, c.b, c.g, k0, kn, w.k);
    } else {
      k = {static_cast<const float*>(a.k.data) + a.k.Offset(c.b, c.g, k0, 0), a.k.strides[2]};
    }
    e.Sgemm(false, true, n, kn, d, p.scale, static_cast<const float*>(q.data) + r0 * q.ld, q.ld,
            k.data, k.ld, 0.0f, w.s, kn);
  }
  // V as P.V's operand: 16-bit as stored with P rounded to it in place (each
  // row's kn floats then hold its 2 kn 16-bit weights, kn of them used);
  // int8 as stored with u8 weights; or f32 (int8 V too when its weights
  // were refused). P's rows are rounded as the softmax leaves each in L1.
  const bool narrow = ctx.pv_type == DType::kBF16 || ctx.pv_type == DType::kF16;
  bool u8 = ctx.pv_type == DType::kI8;
  RawOperand v_stored{nullptr, 0};
  if (narrow || u8) {
    v_stored = StoredRows(ctx, a.v, a.v_scale, c.b, c.g, k0, kn, w.v, u8 ? w.v_scale : nullptr);
  }
  uint16_t* p16 = reinterpret_cast<uint16_t*>(w.s);
  for (int64_t r = r0; r < r0 + n; ++r) {
    float* s = w.s + (r - r0) * kn;
    SoftmaxChunkRow(ctx, c.b, c.h0 + r % c.num_heads, c.i0 + r / c.num_heads, kv_length, k0, kn, s,
                    w.o + r * dv, w.row_max + r, w.row_sum + r, w.row_bad + r);
    // The 16-bit rows dense from w.s's start ([n, kn], lda = kn): oneDNN
    // runs a dense A in its brgemm kernels, a strided one in gemm:jit.
    if (narrow) NarrowRow(s, kn, ctx.pv_type, p16 + (r - r0) * kn);
    if (u8) u8 = QuantizeRowWeights(s, r - r0, n, kn, w);
  }
  if (u8) {
    U8BlocksTimesV(ctx, v_stored, r0, n, kn, first, w);
    return;
  }
  if (!narrow && ctx.plan.stage_kv) {
    StageRows(ctx, a.v, a.v_scale, c.b, c.g, k0, kn, w.v);
  } else if (!narrow) {
    v = {static_cast<const float*>(a.v.data) + a.v.Offset(c.b, c.g, k0, 0), a.v.strides[2]};
  }
  auto v_row_finite = [&](int64_t j) {
    return narrow ? AllFinite16(static_cast<const uint16_t*>(v_stored.data) + j * v_stored.ld, dv,
                                ctx.pv_type)
                  : AllFinite(v.data + j * v.ld, dv);
  };
  // O (+)= P [.., j0:j1) . V [j0:j1, ..].
  auto multiply = [&](int64_t j0, int64_t j1, float beta) {
    if (narrow) {
      e.Gemm16(ctx.pv_type, false, false, n, dv, j1 - j0, 1.0f, p16 + j0, kn,
               static_cast<const uint16_t*>(v_stored.data) + j0 * v_stored.ld, v_stored.ld, beta,
               w.o + r0 * dv, dv);
    } else {
      e.Sgemm(false, false, n, dv, j1 - j0, 1.0f, w.s + j0, kn, v.data + j0 * v.ld, v.ld, beta,
              w.o + r0 * dv, dv);
    }
  };
  // O += P.V, one GEMM per run of keys between V rows that hold a NaN or Inf
  // when some row may not see some key: such a row is flagged for the rows
  // that see it and left out (0 * NaN is NaN, and a key no row sees, padding
  // or keys the dense mask blocks, may hold anything).
  const bool check_rows = !ChunkSeenByAllRows(ctx, c, r0, n, k0, kn, kv_length);
  float beta = first ? 0.0f : 1.0f;
  int64_t j0 = 0;
  for (int64_t j = 0; j <= kn; ++j) {
    if (j < kn && (!check_rows || v_row_finite(j))) continue;
    if (j < kn) {  // V row j is bad
      for (int64_t r = r0; r < r0 + n; ++r) {
        if (PairVisible(ctx, c.b, c.h0 + r % c.num_heads, c.i0 + r / c.num_heads, k0 + j,
                        kv_length)) {
          w.row_bad[r] = 1.0f;
        }
      }
    }
    if (j > j0) {
      multiply(j0, j, beta);
      beta = 1.0f;
    }
    j0 = j + 1;
  }
  if (beta == 0.0f) std::fill(w.o + r0 * dv, w.o + (r0 + n) * dv, 0.0f);  // every key was bad
}

}  // namespace

void ComputeBlock(const BlockContext& ctx, int64_t item, const WorkerScratch& w) {
  const AttentionProblem& p = *ctx.problem;
  const BlockPlan& plan = ctx.plan;
  const BlockCoords c = DecodeItem(p, plan, item);
  const int64_t dv = p.value_dim();  // the accumulator's row length
  const int64_t rows = c.num_heads * c.num_tokens;
  const int64_t kv_length = p.KvLength(c.b);
  auto end_of = [&](int64_t i) {
    return std::min(kv_length, VisibleKeys(ctx.mask, i, kv_length).end);
  };

  // Visible ranges grow monotonically with the query position, so the keys
  // the block can see are [begin of its first row, end of its last row).
  const int64_t k_begin = VisibleKeys(ctx.mask, c.i0, kv_length).begin;
  const int64_t k_end = end_of(c.i0 + c.num_tokens - 1);
  std::fill(w.row_max, w.row_max + rows, kNegInf);
  std::fill(w.row_sum, w.row_sum + rows, 0.0f);
  std::fill(w.row_bad, w.row_bad + rows, 0.0f);

  if (k_begin < k_end) {
    RawOperand q;
    if (ctx.qk_type == DType::kF32) {
      const Operand f = QueryRows(ctx, c, w.q);
      q = {f.data, f.ld};
    } else {
      q = LowPrecisionQueryRows(ctx, c, w);
    }
    // Keys [k_begin, split) are within reach of every row: one GEMM pair per
    // chunk over all rows. Past split (the causal diagonal) each panel of
    // plan.panel_tokens positions takes only the keys its last row can see,
    // so the masked corner multiplied shrinks from tokens^2/2 to tokens *
    // panel_tokens / 2 per head.
    const int64_t panels = CeilDiv(c.num_tokens, plan.panel_tokens);
    const int64_t split = panels > 1 ? std::max(k_begin, std::min(k_end, end_of(c.i0))) : k_end;
    for (int64_t k0 = k_begin; k0 < split; k0 += plan.key_chunk) {
      RowsAgainstKeys(ctx, c, q, 0, rows, k0, std::min(plan.key_chunk, split - k0), k0 == k_begin,
                      w);
    }
    for (int64_t t0 = 0; t0 < c.num_tokens && split < k_end; t0 += plan.panel_tokens) {
      const int64_t tn = std::min(plan.panel_tokens, c.num_tokens - t0);
      const int64_t panel_end = end_of(c.i0 + t0 + tn - 1);
      for (int64_t k0 = split; k0 < panel_end; k0 += plan.key_chunk) {
        RowsAgainstKeys(ctx, c, q, t0 * c.num_heads, tn * c.num_heads, k0,
                        std::min(plan.key_chunk, panel_end - k0), k0 == k_begin, w);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    StoreRow(ctx, c.b, c.h0 + r % c.num_heads, c.i0 + r / c.num_heads, w.o + r * dv, w.row_max[r],
             w.row_sum[r], w.row_bad[r] != 0.0f);
  }
}

}  // namespace blas
}  // namespace attnkit

#include "harness/problem_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/quantize.h"
#include "core/status_macros.h"
#include "harness/poison_blocked.h"

namespace attnkit {
namespace {

int32_t* I32(const Tensor& t) { return static_cast<int32_t*>(t.data()); }

// Fills cu[0..B] with 0 and the running sums of length(b).
template <typename Length>
void FillOffsets(const Tensor& cu, int64_t batch, Length length) {
  int64_t sum = 0;
  for (int64_t b = 0; b <= batch; ++b) {
    I32(cu)[b] = static_cast<int32_t>(sum);
    if (b < batch) sum += length(b);
  }
}

// Draws f32 rows uniform in [-1, 1] and stores them quantized: `kv` holds
// int8 or fp8 [rows, d] (contiguous), `scale` one f32 per row.
void FillQuantized(const Tensor& kv, const Tensor& scale, int64_t head_dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t rows = kv.view().NumElements() / head_dim;
  std::vector<float> row(static_cast<size_t>(head_dim));
  const DType type = kv.view().dtype;
  auto* s = static_cast<float*>(scale.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = dist(rng);
    if (type == DType::kI8) {
      s[r] = QuantizeRowI8(row.data(), head_dim, static_cast<int8_t*>(kv.data()) + r * head_dim);
    } else {
      s[r] = QuantizeRowFp8(row.data(), head_dim, Fp8FormatOf(type),
                            static_cast<uint8_t*>(kv.data()) + r * head_dim);
    }
  }
}

// Shuffled pages for every sequence's keys (see ProblemData::Random).
void DrawBlockTable(const AttentionProblem& p, const Tensor& table, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> pool(static_cast<size_t>(p.num_pages));
  for (int64_t i = 0; i < p.num_pages; ++i) pool[i] = static_cast<int32_t>(i);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int64_t max_pages = p.max_pages();
  std::vector<int64_t> used(static_cast<size_t>(p.batch));
  int64_t needed = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    used[b] = (p.KvLength(b) + p.page_size - 1) / p.page_size;
    needed += used[b];
  }
  // Too few pages: sequences b > 0 take their first `shared` pages from
  // sequence 0 (a common prefix), the rest wrap around the pool.
  const int64_t shared =
      needed <= p.num_pages || p.batch == 1
          ? 0
          : std::min(used[0], (needed - p.num_pages + p.batch - 2) / (p.batch - 1));
  int64_t next = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t j = 0; j < max_pages; ++j) {
      int32_t page = -1;
      if (j < used[b]) {
        page = b > 0 && j < shared && j < used[0] ? I32(table)[j]
                                                  : pool[static_cast<size_t>(next++ % p.num_pages)];
      }
      I32(table)[b * max_pages + j] = page;
    }
  }
}

// NaN in every pool row no sequence reads (its scale, for int8 K/V).
void PoisonUnreadPoolRows(const AttentionProblem& p, const ProblemData& d) {
  std::vector<bool> read(static_cast<size_t>(p.num_pages * p.page_size), false);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.KvLength(b); ++t) {
      const int32_t page = I32(d.block_table)[b * p.max_pages() + t / p.page_size];
      read[static_cast<size_t>(page * p.page_size + t % p.page_size)] = true;
    }
  }
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  // Elements of one pool row (all G heads) in k and in v.
  const int64_t k_row = p.num_kv_heads * p.head_dim, v_row = p.num_kv_heads * p.value_dim();
  for (size_t r = 0; r < read.size(); ++r) {
    if (read[r]) continue;
    const int64_t at = static_cast<int64_t>(r);
    if (IsScaledKv(p.kv_dtype)) {
      for (const Tensor* s : {&d.k_scale, &d.v_scale}) {
        float* x = static_cast<float*>(s->data()) + at * p.num_kv_heads;
        std::fill(x, x + p.num_kv_heads, kNaN);
      }
    } else {
      for (int64_t c = 0; c < k_row; ++c)
        StoreFromF32(d.k.data(), p.kv_dtype, at * k_row + c, kNaN);
      for (int64_t c = 0; c < v_row; ++c)
        StoreFromF32(d.v.data(), p.kv_dtype, at * v_row + c, kNaN);
    }
  }
}

}  // namespace

absl::StatusOr<ProblemData> ProblemData::Allocate(const AttentionProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  ATTNKIT_RETURN_IF_ERROR(CheckMemoryBudget(p));  // before any allocation
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t dv = p.value_dim();  // V and O
  ProblemData data;
  if (p.is_ragged()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.q, Tensor::Contiguous(p.dtype, {p.TotalQ(), H, d}));
    ATTNKIT_ASSIGN_OR_RETURN(data.o, Tensor::Contiguous(p.dtype, {p.TotalQ(), H, dv}));
    ATTNKIT_ASSIGN_OR_RETURN(data.cu_seqlens_q, Tensor::Contiguous(DType::kI32, {B + 1}));
    FillOffsets(data.cu_seqlens_q, B, [&](int64_t b) { return p.QLength(b); });
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(data.q, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(data.o, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, dv));
  }
  // K/V rows without the head dim: [B, G, Tk] (in p.layout), a pool or packed.
  std::vector<int64_t> rows;
  if (p.is_paged()) {
    rows = {p.num_pages, p.page_size, G};
  } else if (p.is_ragged()) {
    rows = {p.TotalK(), G};
  }
  if (rows.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.k, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(data.v, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, dv));
    if (IsScaledKv(p.kv_dtype)) {
      // Scales follow K's token order: [B, G, Tk] viewed from [B, Tk, G] for BTHD.
      for (Tensor* s : {&data.k_scale, &data.v_scale}) {
        ATTNKIT_ASSIGN_OR_RETURN(*s, Tensor::Attention(DType::kF32, p.layout, B, G, p.kv_len, 1));
        TensorView v = s->view();
        v.rank = 3;
        v.shape = {B, G, p.kv_len, 0};
        v.strides[3] = 0;
        ATTNKIT_RETURN_IF_ERROR(s->SetView(v));
      }
    }
  } else {
    std::vector<int64_t> k_shape = rows, v_shape = rows;
    k_shape.push_back(d);
    v_shape.push_back(dv);
    ATTNKIT_ASSIGN_OR_RETURN(data.k, Tensor::Contiguous(p.kv_dtype, k_shape));
    ATTNKIT_ASSIGN_OR_RETURN(data.v, Tensor::Contiguous(p.kv_dtype, v_shape));
    if (IsScaledKv(p.kv_dtype)) {
      ATTNKIT_ASSIGN_OR_RETURN(data.k_scale, Tensor::Contiguous(DType::kF32, rows));
      ATTNKIT_ASSIGN_OR_RETURN(data.v_scale, Tensor::Contiguous(DType::kF32, rows));
    }
  }
  if (p.is_paged()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.block_table, Tensor::Contiguous(DType::kI32, {B, p.max_pages()}));
    for (int64_t i = 0; i < B * p.max_pages(); ++i) {
      I32(data.block_table)[i] = static_cast<int32_t>(i % p.num_pages);
    }
  } else if (p.is_ragged()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.cu_seqlens_k, Tensor::Contiguous(DType::kI32, {B + 1}));
    FillOffsets(data.cu_seqlens_k, B, [&](int64_t b) { return p.KvLength(b); });
  }
  if (p.return_lse) {
    ATTNKIT_ASSIGN_OR_RETURN(data.lse, p.is_ragged()
                                           ? Tensor::Contiguous(DType::kF32, {H, p.TotalQ()})
                                           : Tensor::Contiguous(DType::kF32, {B, H, p.q_len}));
  }
  if (p.has_kv_lengths()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.kv_lengths, Tensor::Contiguous(DType::kI32, {B}));
    for (int64_t b = 0; b < B; ++b) I32(data.kv_lengths)[b] = static_cast<int32_t>(p.kv_lengths[b]);
  }
  if (p.blocked_mask) {
    ATTNKIT_ASSIGN_OR_RETURN(data.blocked_mask,
                             Tensor::Contiguous(DType::kU8, {B, H, p.q_len, p.kv_len}));
  }
  if (p.additive_bias) {
    ATTNKIT_ASSIGN_OR_RETURN(data.bias, Tensor::Contiguous(DType::kF32, {B, H, p.q_len, p.kv_len}));
  }
  if (p.sinks) {
    ATTNKIT_ASSIGN_OR_RETURN(data.sinks, Tensor::Contiguous(DType::kF32, {H}));
  }
  if (p.alibi) {
    ATTNKIT_ASSIGN_OR_RETURN(data.alibi_slopes, Tensor::Contiguous(DType::kF32, {H}));
  }
  return data;
}

absl::StatusOr<ProblemData> ProblemData::Random(const AttentionProblem& p, uint64_t seed) {
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, Allocate(p));
  FillUniform(data.q.view(), seed * 4 + 1, -1.0f, 1.0f);
  if (IsScaledKv(p.kv_dtype)) {
    // Dense BTHD scales are viewed [B, G, Tk] over [B, Tk, G] storage: the
    // rows of k (contiguous [.., G, d] or [B, G, Tk, d]) and the scale
    // storage are in the same order in every layout this allocates.
    FillQuantized(data.k, data.k_scale, p.head_dim, seed * 4 + 2);
    FillQuantized(data.v, data.v_scale, p.value_dim(), seed * 4 + 3);
  } else {
    FillUniform(data.k.view(), seed * 4 + 2, -1.0f, 1.0f);
    FillUniform(data.v.view(), seed * 4 + 3, -1.0f, 1.0f);
  }
  if (p.additive_bias) FillUniform(data.bias.view(), seed * 4 + 4, -1.0f, 1.0f);
  if (p.sinks) {
    // Random scores here are small, so a row's keys hold about log(Tk) of
    // softmax mass: sinks around it take from 5 % to 95 % of each row.
    const float center = static_cast<float>(std::log(static_cast<double>(p.kv_len)));
    FillUniform(data.sinks.view(), seed * 4 + 9, center - 3.0f, center + 3.0f);
  }
  // ALiBi slopes as BLOOM's span them (2^-8 to 2^-1 for 8 heads); a slope of
  // 0.5 leaves about 20 keys of weight around the diagonal.
  if (p.alibi) FillUniform(data.alibi_slopes.view(), seed * 4 + 10, 1.0f / 256, 0.5f);
  if (p.blocked_mask) {
    std::mt19937_64 rng(seed * 4 + 5);
    auto* m = static_cast<uint8_t*>(data.blocked_mask.data());
    const int64_t n = data.blocked_mask.view().NumElements();
    for (int64_t i = 0; i < n; ++i) m[i] = (rng() % 5 == 0) ? 1 : 0;
  }
  if (p.is_paged()) {
    DrawBlockTable(p, data.block_table, seed * 4 + 8);
    PoisonUnreadPoolRows(p, data);
  }
  if (p.poison_blocked) PoisonBlockedInputs(p, data.args(), seed * 4 + 6);
  if (p.nonfinite_inputs > 0) PoisonRandomInputs(p, data.args(), p.nonfinite_inputs, seed * 4 + 7);
  return data;
}

AttentionArgs ProblemData::args() const {
  AttentionArgs a;
  a.q = q.view();
  a.k = k.view();
  a.v = v.view();
  a.o = o.view();
  a.lse = lse.view();
  a.kv_lengths = kv_lengths.view();
  a.blocked_mask = blocked_mask.view();
  a.bias = bias.view();
  a.k_scale = k_scale.view();
  a.v_scale = v_scale.view();
  a.block_table = block_table.view();
  a.cu_seqlens_q = cu_seqlens_q.view();
  a.cu_seqlens_k = cu_seqlens_k.view();
  a.sinks = sinks.view();
  a.alibi_slopes = alibi_slopes.view();
  return a;
}

}  // namespace attnkit

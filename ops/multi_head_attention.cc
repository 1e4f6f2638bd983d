#include "ops/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/auto_select.h"
#include "core/alibi.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "io/npy.h"

namespace attnkit {
namespace {

std::string ShapeString(const TensorView& t) {
  std::vector<int64_t> dims(t.shape.begin(), t.shape.begin() + t.rank);
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Rules the operator does not have but the layer does.
absl::Status ValidateForLayer(const AttentionProblem& p) {
  if (p.model_dim % p.num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model_dim (%d) must be divisible by num_heads (%d) for the layer",
                        p.model_dim, p.num_heads));
  }
  if (p.dtype != DType::kF32 || p.kv_dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the layer computes in f32: dtype (%s) and kv_dtype (%s) must be F32 (a KV cache may "
        "still store 16-bit values)",
        DTypeName(p.dtype), DTypeName(p.kv_dtype)));
  }
  const struct {
    bool on;
    const char* field;
  } unsupported[] = {{p.has_kv_lengths(), "kv_lengths"},
                     {p.blocked_mask, "blocked_mask"},
                     {p.additive_bias, "additive_bias"},
                     {p.return_lse, "return_lse"}};
  for (const auto& u : unsupported) {
    if (u.on) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is set, but the layer takes no such input; the KV cache supplies per-sequence "
          "lengths",
          u.field));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t RowStride(const TensorView& x) {
  if (x.rank != 3 || x.strides[2] != 1) return -1;
  if (x.shape[1] == 1) return x.strides[0];  // one token per sequence: rows are the batch
  if (x.shape[0] == 1 || x.strides[0] == x.shape[1] * x.strides[1]) return x.strides[1];
  return -1;
}

absl::Status CheckActivations(const char* name, const TensorView& x, int64_t model_dim) {
  if (x.empty() || x.rank != 3 || x.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrFormat("%s must be an f32 [B, T, D] tensor; got %s",
                                                      name, x.empty() ? "none" : x.DebugString()));
  }
  if (x.shape[2] != model_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s has shape %s; its last dim must be model_dim (%d)", name, ShapeString(x), model_dim));
  }
  if (x.shape[0] < 1 || x.shape[1] < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has shape %s; B and T must be >= 1", name, ShapeString(x)));
  }
  if (x.strides[2] != 1 || (x.shape[1] > 1 && x.strides[1] < model_dim) ||
      (x.shape[0] > 1 && x.strides[0] < 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%s) must have a contiguous last dim and rows that do not overlap",
                        name, x.DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MultiHeadAttention>> MultiHeadAttention::Create(
    const AttentionConfig& config, const LayerOptions& options, const BackendRegistry& registry) {
  AttentionConfig c = config;
  if (c.q_len() == 0) c.set_q_len(1);  // shapes come with each call
  ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem p, ProblemFromConfig(c));
  ATTNKIT_RETURN_IF_ERROR(ValidateForLayer(p));
  p.layout = Layout::kBTHD;  // q and o are views of the projections' rows
  p.kv_len = p.q_len;

  std::unique_ptr<MultiHeadAttention> layer(new MultiHeadAttention());
  layer->options_ = options;
  ATTNKIT_ASSIGN_OR_RETURN(const Selection selection,
                           SelectBackend(registry, p.backend, p, options.threads));
  layer->registry_ = &registry;
  layer->auto_ = p.backend.empty() || p.backend == "auto";
  layer->runners_.push_back(std::make_unique<AttentionRunner>(selection.backend));
  layer->runner_ = layer->runners_.back().get();
  layer->selection_reason_ = selection.reason;
  if (options.matmul.empty()) {
    layer->matmul_ = &MatmulForBackend(selection.backend->Name());
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(layer->matmul_, FindMatmul(options.matmul));
  }
  layer->problem_ = p;

  // Q, K: head_dim (E) per head; V, O: value_dim() (Ev).
  const int64_t D = p.model_dim, Hd = p.num_heads * p.head_dim, Gd = p.num_kv_heads * p.head_dim;
  const int64_t Hdv = p.num_heads * p.value_dim(), Gdv = p.num_kv_heads * p.value_dim();
  AttentionWeights& w = layer->weights_;
  ATTNKIT_ASSIGN_OR_RETURN(w.wq, Tensor::Contiguous(DType::kF32, {Hd, D}));
  ATTNKIT_ASSIGN_OR_RETURN(w.wk, Tensor::Contiguous(DType::kF32, {Gd, D}));
  ATTNKIT_ASSIGN_OR_RETURN(w.wv, Tensor::Contiguous(DType::kF32, {Gdv, D}));
  ATTNKIT_ASSIGN_OR_RETURN(w.wo, Tensor::Contiguous(DType::kF32, {D, Hdv}));
  if (options.bias) {
    ATTNKIT_ASSIGN_OR_RETURN(w.bq, Tensor::Contiguous(DType::kF32, {Hd}));
    ATTNKIT_ASSIGN_OR_RETURN(w.bk, Tensor::Contiguous(DType::kF32, {Gd}));
    ATTNKIT_ASSIGN_OR_RETURN(w.bv, Tensor::Contiguous(DType::kF32, {Gdv}));
    ATTNKIT_ASSIGN_OR_RETURN(w.bo, Tensor::Contiguous(DType::kF32, {D}));
  }
  if (p.sinks) {  // zero-filled: each sink starts at logit 0
    ATTNKIT_ASSIGN_OR_RETURN(w.sinks, Tensor::Contiguous(DType::kF32, {p.num_heads}));
  }
  if (p.alibi) {
    ATTNKIT_ASSIGN_OR_RETURN(w.alibi_slopes, Tensor::Contiguous(DType::kF32, {p.num_heads}));
    const std::vector<float> slopes = DefaultAlibiSlopes(p.num_heads);
    std::copy(slopes.begin(), slopes.end(), static_cast<float*>(w.alibi_slopes.data()));
  }
  // nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weights and biases.
  const uint64_t s = options.seed * 16;
  const float in_q = 1.0f / std::sqrt(float(D)), in_o = 1.0f / std::sqrt(float(Hdv));
  const Tensor* tensors[] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.bo};
  for (int i = 0; i < 8; ++i) {
    if (tensors[i]->view().empty()) continue;
    const float bound = (i % 4 == 3) ? in_o : in_q;
    FillUniform(tensors[i]->view(), s + i + 1, -bound, bound);
  }
  return layer;
}

absl::Status MultiHeadAttention::SetWeight(const std::string& name, const TensorView& value) {
  const struct {
    const char* name;
    Tensor* tensor;
    const char* rule;
  } slots[] = {
      {"wq", &weights_.wq, "[num_heads * head_dim, model_dim]"},
      {"wk", &weights_.wk, "[num_kv_heads * head_dim, model_dim]"},
      {"wv", &weights_.wv, "[num_kv_heads * value_head_dim, model_dim]"},
      {"wo", &weights_.wo, "[model_dim, num_heads * value_head_dim]"},
      {"bq", &weights_.bq, "[num_heads * head_dim]"},
      {"bk", &weights_.bk, "[num_kv_heads * head_dim]"},
      {"bv", &weights_.bv, "[num_kv_heads * value_head_dim]"},
      {"bo", &weights_.bo, "[model_dim]"},
      {"sinks", &weights_.sinks, "[num_heads]"},
      {"alibi_slopes", &weights_.alibi_slopes, "[num_heads]"},
  };
  for (const auto& slot : slots) {
    if (name != slot.name) continue;
    const TensorView& dst = slot.tensor->view();
    if (dst.empty()) {
      const bool per_head = name == "sinks" || name == "alibi_slopes";
      return absl::InvalidArgumentError(absl::StrCat(
          name, " given but ",
          per_head ? absl::StrCat("the config has ", name == "sinks" ? "sinks" : "alibi", " off")
                   : "the layer has no bias (LayerOptions.bias is off)"));
    }
    bool same = value.rank == dst.rank;
    for (int i = 0; same && i < dst.rank; ++i) same = value.shape[i] == dst.shape[i];
    if (!same) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s has shape %s; expected %s = %s ([out, in], as torch.nn.Linear.weight)", name,
          ShapeString(value), ShapeString(dst), slot.rule));
    }
    if (value.dtype != DType::kF32 && value.dtype != DType::kF16) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has dtype %s; expected f32 or f16", name, DTypeName(value.dtype)));
    }
    auto* out = static_cast<float*>(dst.data);
    int64_t i = 0;
    ForEachOffset(value, [&](int64_t off) { out[i++] = value.LoadF32(off); });
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weight '", name,
                   "'; expected wq, wk, wv, wo, bq, bk, bv, bo, sinks or alibi_slopes"));
}

absl::Status MultiHeadAttention::LoadNpy(const std::string& dir) {
  std::vector<std::string> names = {"wq", "wk", "wv", "wo"};
  if (options_.bias) names.insert(names.end(), {"bq", "bk", "bv", "bo"});
  if (problem_.sinks) names.push_back("sinks");  // learned: always part of the weights
  // ALiBi slopes are usually the paper's (the default): loaded when present.
  if (problem_.alibi && std::filesystem::exists(absl::StrCat(dir, "/alibi_slopes.npy"))) {
    names.push_back("alibi_slopes");
  }
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name, ".npy");
    ATTNKIT_ASSIGN_OR_RETURN(NpyArray array, ReadNpy(path));
    const absl::Status s = SetWeight(name, array.tensor.view());
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return absl::OkStatus();
}

int64_t MultiHeadAttention::NumParameters() const {
  int64_t n = 0;
  for (const Tensor* t : {&weights_.wq, &weights_.wk, &weights_.wv, &weights_.wo, &weights_.bq,
                          &weights_.bk, &weights_.bv, &weights_.bo, &weights_.sinks}) {
    if (!t->view().empty()) n += t->view().NumElements();
  }
  return n;
}

absl::StatusOr<KVCache> MultiHeadAttention::NewCache(int64_t batch, int64_t capacity,
                                                     DType dtype) const {
  return KVCache::Create(batch, problem_.num_kv_heads, capacity, problem_.head_dim, dtype,
                         problem_.value_dim());
}

absl::StatusOr<KVCache> MultiHeadAttention::NewPagedCache(int64_t batch, int64_t page_size,
                                                          int64_t num_pages, DType dtype) const {
  return KVCache::CreatePaged(batch, problem_.num_kv_heads, problem_.head_dim, page_size, num_pages,
                              dtype, problem_.value_dim());
}

void MultiHeadAttention::Linear(const TensorView& x, const Tensor& w, const Tensor& b, float* y,
                                const TensorView* y_view) const {
  const int64_t B = x.shape[0], T = x.shape[1], n = w.view().dim(0), k = w.view().dim(1);
  const float* wd = static_cast<const float*>(w.data());
  const float* bd = b.view().empty() ? nullptr : static_cast<const float*>(b.data());
  const auto* xd = static_cast<const float*>(x.data);
  // One matmul over all B*T rows when both sides are evenly strided (always
  // for a decode step); else one per sequence.
  const int64_t ldx = RowStride(x), ldy = y_view ? RowStride(*y_view) : n;
  if (ldx >= 0 && ldy >= 0) {
    matmul_->Linear(xd, ldx, wd, bd, B * T, n, k, y, ldy);
    return;
  }
  for (int64_t i = 0; i < B; ++i) {
    float* yb = y_view ? y + i * y_view->strides[0] : y + i * T * n;
    matmul_->Linear(xd + i * x.strides[0], x.strides[1], wd, bd, T, n, k, yb,
                    y_view ? y_view->strides[1] : n);
  }
}

absl::StatusOr<MultiHeadAttention::Projections> MultiHeadAttention::Project(
    const TensorView& x, const TensorView& kv_source) {
  const int64_t B = x.shape[0], Tq = x.shape[1], Tk = kv_source.shape[1];
  const int64_t d = problem_.head_dim, Gd = problem_.num_kv_heads * d;
  const int64_t Gdv = problem_.num_kv_heads * problem_.value_dim();
  Projections p;
  ATTNKIT_ASSIGN_OR_RETURN(p.q, q_ws_.Get(B * Tq * problem_.num_heads * d));
  ATTNKIT_ASSIGN_OR_RETURN(p.k, k_ws_.Get(B * Tk * Gd));
  ATTNKIT_ASSIGN_OR_RETURN(p.v, v_ws_.Get(B * Tk * Gdv));
  Linear(x, weights_.wq, weights_.bq, p.q);
  Linear(kv_source, weights_.wk, weights_.bk, p.k);
  Linear(kv_source, weights_.wv, weights_.bv, p.v);
  return p;
}

absl::Status MultiHeadAttention::AttendAndMerge(float* q, int64_t batch, int64_t q_len,
                                                AttentionArgs args, const TensorView& y,
                                                KVCache* cache) {
  const AttentionProblem& p = problem_;
  const int64_t Hdv = p.num_heads * p.value_dim();
  ATTNKIT_ASSIGN_OR_RETURN(float* o, o_ws_.Get(batch * q_len * Hdv));
  // [B*T, H*d] rows read as [B, H, T, d]: the head split without a copy.
  args.q = AttentionView(q, DType::kF32, Layout::kBTHD, batch, p.num_heads, q_len, p.head_dim);
  args.o = AttentionView(o, DType::kF32, Layout::kBTHD, batch, p.num_heads, q_len, p.value_dim());
  args.sinks = weights_.sinks.view();
  args.alibi_slopes = weights_.alibi_slopes.view();
  ATTNKIT_RETURN_IF_ERROR(cache != nullptr ? runner_->RunWithCache(p, args, cache, &last_run_)
                                           : runner_->Run(p, args, &last_run_));
  // O [B*T, H*Ev] is already the merged heads; y = O Wo^T.
  Linear(ContiguousView(o, DType::kF32, {batch, q_len, Hdv}), weights_.wo, weights_.bo,
         static_cast<float*>(y.data), &y);
  return absl::OkStatus();
}

absl::Status MultiHeadAttention::ChooseBackend() {
  if (!auto_) return absl::OkStatus();
  ATTNKIT_ASSIGN_OR_RETURN(const Selection selection,
                           SelectBackend(*registry_, "auto", problem_, options_.threads));
  selection_reason_ = selection.reason;
  for (const auto& r : runners_) {
    if (r->backend() == selection.backend) {
      runner_ = r.get();
      return absl::OkStatus();
    }
  }
  runners_.push_back(std::make_unique<AttentionRunner>(selection.backend));
  runner_ = runners_.back().get();
  return absl::OkStatus();
}

int64_t MultiHeadAttention::uploaded_bytes() const {
  int64_t n = 0;
  for (const auto& r : runners_) n += r->uploaded_bytes();
  return n;
}

absl::Status MultiHeadAttention::Forward(const TensorView& x, const TensorView& y) {
  return CrossForward(x, x, y);
}

absl::Status MultiHeadAttention::CrossForward(const TensorView& x, const TensorView& context,
                                              const TensorView& y) {
  const int64_t D = problem_.model_dim;
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("x", x, D));
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("context", context, D));
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("y", y, D));
  const int64_t B = x.shape[0], Tq = x.shape[1], Tk = context.shape[1];
  if (context.shape[0] != B || y.shape[0] != B || y.shape[1] != Tq) {
    return absl::InvalidArgumentError(
        absl::StrFormat("x %s, context %s and y %s must agree: context [B, Tk, D], y [B, Tq, D]",
                        ShapeString(x), ShapeString(context), ShapeString(y)));
  }
  const int64_t G = problem_.num_kv_heads, d = problem_.head_dim;
  ATTNKIT_ASSIGN_OR_RETURN(const Projections qkv, Project(x, context));
  problem_.batch = B;
  problem_.q_len = Tq;
  problem_.kv_len = Tk;
  problem_.kv_dtype = DType::kF32;
  problem_.kv_lengths.clear();
  problem_.page_size = problem_.num_pages = 0;
  ATTNKIT_RETURN_IF_ERROR(ChooseBackend());
  AttentionArgs kv;
  kv.k = AttentionView(qkv.k, DType::kF32, Layout::kBTHD, B, G, Tk, d);
  kv.v = AttentionView(qkv.v, DType::kF32, Layout::kBTHD, B, G, Tk, problem_.value_dim());
  return AttendAndMerge(qkv.q, B, Tq, kv, y);
}

absl::Status MultiHeadAttention::ForwardCached(const TensorView& x, KVCache* cache,
                                               const TensorView& y) {
  const int64_t D = problem_.model_dim, G = problem_.num_kv_heads, d = problem_.head_dim;
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("x", x, D));
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("y", y, D));
  const int64_t B = x.shape[0], T = x.shape[1];
  if (y.shape[0] != B || y.shape[1] != T) {
    return absl::InvalidArgumentError(
        absl::StrFormat("y %s must have x's shape %s", ShapeString(y), ShapeString(x)));
  }
  const int64_t dv = problem_.value_dim();
  if (cache->batch() != B || cache->kv_heads() != G || cache->head_dim() != d ||
      cache->value_dim() != dv) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache [B %d, Hkv %d, d %d, Ev %d] does not match the input batch (%d) and the "
        "layer's num_kv_heads (%d), head_dim (%d) and value head dim (%d)",
        cache->batch(), cache->kv_heads(), cache->head_dim(), cache->value_dim(), B, G, d, dv));
  }
  ATTNKIT_RETURN_IF_ERROR(cache->CheckRoom(T));
  // The problem after the append: every sequence grows by T. Per-sequence
  // lengths go to the backend only when they differ. A paged cache is read
  // through its block tables, an int8 one with its scales.
  problem_.batch = B;
  problem_.q_len = T;
  problem_.kv_len = cache->max_length() + T;
  problem_.kv_dtype = cache->dtype();
  problem_.kv_lengths.clear();
  if (!cache->uniform_lengths()) {
    for (int64_t b = 0; b < B; ++b) problem_.kv_lengths.push_back(cache->length(b) + T);
  }
  problem_.page_size = cache->page_size();
  problem_.num_pages = cache->num_pages();
  // Choose (auto) and refuse before touching the cache.
  ATTNKIT_RETURN_IF_ERROR(ChooseBackend());
  ATTNKIT_RETURN_IF_ERROR(backend()->Supports(problem_));

  ATTNKIT_ASSIGN_OR_RETURN(const Projections qkv, Project(x, x));
  ATTNKIT_RETURN_IF_ERROR(cache->Append(qkv.k, G * d, qkv.v, G * dv, T));
  AttentionArgs kv;
  kv.k = cache->keys();
  kv.v = cache->values();
  kv.k_scale = cache->key_scales();  // empty unless int8
  kv.v_scale = cache->value_scales();
  kv.block_table = cache->block_table_view(problem_.max_pages());  // empty unless paged
  if (problem_.has_kv_lengths()) kv.kv_lengths = cache->kv_lengths_view();
  const absl::Status s = AttendAndMerge(qkv.q, B, T, kv, y, cache);
  if (!s.ok()) {  // undo the append, so a failed step leaves the cache as it was
    std::vector<int64_t> lengths = cache->lengths();
    for (int64_t& l : lengths) l -= T;
    cache->SetLengths(lengths).IgnoreError();
  }
  return s;
}

}  // namespace attnkit

namespace attnkit {
namespace {

// The B*T rows of a [B, T, D] view x, into contiguous dst [B*T, D].
void GatherRows(const TensorView& x, float* dst) {
  const int64_t B = x.shape[0], T = x.shape[1], D = x.shape[2];
  const auto* src = static_cast<const float*>(x.data);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(dst + (b * T + t) * D, src + b * x.strides[0] + t * x.strides[1],
                  static_cast<size_t>(D) * sizeof(float));
    }
  }
}

// The inverse: contiguous src [B*T, D] into the rows of the view y.
void ScatterRows(const float* src, const TensorView& y) {
  const int64_t B = y.shape[0], T = y.shape[1], D = y.shape[2];
  auto* dst = static_cast<float*>(y.data);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(dst + b * y.strides[0] + t * y.strides[1], src + (b * T + t) * D,
                  static_cast<size_t>(D) * sizeof(float));
    }
  }
}

float* Data(const Tensor& t) { return t.view().empty() ? nullptr : static_cast<float*>(t.data()); }

}  // namespace

absl::Status MultiHeadAttention::EnsureGradients() {
  if (!grads_.wq.view().empty()) return absl::OkStatus();
  const Tensor* w[] = {&weights_.wq, &weights_.wk, &weights_.wv, &weights_.wo,   &weights_.bq,
                       &weights_.bk, &weights_.bv, &weights_.bo, &weights_.sinks};
  Tensor* g[] = {&grads_.wq, &grads_.wk, &grads_.wv, &grads_.wo,   &grads_.bq,
                 &grads_.bk, &grads_.bv, &grads_.bo, &grads_.sinks};
  for (int i = 0; i < 9; ++i) {
    if (w[i]->view().empty()) continue;
    const TensorView& v = w[i]->view();
    // Allocation zero-fills: the gradients start at 0.
    ATTNKIT_ASSIGN_OR_RETURN(
        *g[i], Tensor::Contiguous(DType::kF32, {v.shape.data(), static_cast<size_t>(v.rank)}));
  }
  return absl::OkStatus();
}

absl::Status MultiHeadAttention::ZeroGradients() {
  ATTNKIT_RETURN_IF_ERROR(EnsureGradients());
  for (Tensor* g : {&grads_.wq, &grads_.wk, &grads_.wv, &grads_.wo, &grads_.bq, &grads_.bk,
                    &grads_.bv, &grads_.bo, &grads_.sinks}) {
    if (g->view().empty()) continue;
    std::memset(g->data(), 0, static_cast<size_t>(g->view().NumElements()) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamRef>> MultiHeadAttention::Parameters(const std::string& prefix) {
  ATTNKIT_RETURN_IF_ERROR(EnsureGradients());
  const struct {
    const char* name;
    const Tensor* value;
    const Tensor* grad;
  } slots[] = {{"wq", &weights_.wq, &grads_.wq},         {"wk", &weights_.wk, &grads_.wk},
               {"wv", &weights_.wv, &grads_.wv},         {"wo", &weights_.wo, &grads_.wo},
               {"bq", &weights_.bq, &grads_.bq},         {"bk", &weights_.bk, &grads_.bk},
               {"bv", &weights_.bv, &grads_.bv},         {"bo", &weights_.bo, &grads_.bo},
               {"sinks", &weights_.sinks, &grads_.sinks}};
  std::vector<ParamRef> out;
  for (const auto& s : slots) {
    if (s.value->view().empty()) continue;
    ParamRef p;
    p.name = prefix + s.name;
    p.value = Data(*s.value);
    p.grad = Data(*s.grad);
    p.size = s.value->view().NumElements();
    p.decay = s.name[0] == 'w';
    out.push_back(std::move(p));
  }
  return out;
}

absl::Status MultiHeadAttention::ForwardTrain(const TensorView& x, const TensorView& y) {
  const int64_t D = problem_.model_dim, H = problem_.num_heads, G = problem_.num_kv_heads,
                d = problem_.head_dim;
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("x", x, D));
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("y", y, D));
  const int64_t B = x.shape[0], T = x.shape[1];
  if (y.shape[0] != B || y.shape[1] != T) {
    return absl::InvalidArgumentError(
        absl::StrFormat("y %s must have x's shape %s", ShapeString(y), ShapeString(x)));
  }
  has_train_state_ = false;
  problem_.batch = B;
  problem_.q_len = T;
  problem_.kv_len = T;
  problem_.kv_dtype = DType::kF32;
  problem_.kv_lengths.clear();
  problem_.page_size = problem_.num_pages = 0;
  ATTNKIT_RETURN_IF_ERROR(ChooseBackend());
  AttentionProblem tp = problem_;
  tp.return_lse = true;  // the backward pass recomputes P = exp(S - lse)
  Backend* backend = runner_->backend();
  if (!backend->UsesHostMemory()) {
    return absl::UnimplementedError(absl::StrFormat(
        "training runs the attention backward pass on host memory; backend '%s' keeps its "
        "tensors in device memory",
        backend->Name()));
  }
  ATTNKIT_RETURN_IF_ERROR(backend->Supports(tp));
  const absl::Status bw = backend->SupportsBackward(tp);
  if (!bw.ok()) {
    return absl::UnimplementedError(absl::StrFormat(
        "backend '%s' has no backward pass for this layer: %s", backend->Name(), bw.message()));
  }
  ATTNKIT_RETURN_IF_ERROR(EnsureGradients());
  const int64_t dv = problem_.value_dim();  // V and O
  const int64_t M = B * T, Hd = H * d, Gd = G * d, Hdv = H * dv, Gdv = G * dv;
  ATTNKIT_ASSIGN_OR_RETURN(float* tx, tx_ws_.Get(M * D));
  ATTNKIT_ASSIGN_OR_RETURN(float* tq, tq_ws_.Get(M * Hd));
  ATTNKIT_ASSIGN_OR_RETURN(float* tk, tk_ws_.Get(M * Gd));
  ATTNKIT_ASSIGN_OR_RETURN(float* tv, tv_ws_.Get(M * Gdv));
  ATTNKIT_ASSIGN_OR_RETURN(float* to, to_ws_.Get(M * Hdv));
  ATTNKIT_ASSIGN_OR_RETURN(float* tlse, tlse_ws_.Get(B * H * T));
  GatherRows(x, tx);  // first: y may be x
  const TensorView xv = ContiguousView(tx, DType::kF32, {B, T, D});
  Linear(xv, weights_.wq, weights_.bq, tq);
  Linear(xv, weights_.wk, weights_.bk, tk);
  Linear(xv, weights_.wv, weights_.bv, tv);
  AttentionArgs args;
  args.q = AttentionView(tq, DType::kF32, Layout::kBTHD, B, H, T, d);
  args.k = AttentionView(tk, DType::kF32, Layout::kBTHD, B, G, T, d);
  args.v = AttentionView(tv, DType::kF32, Layout::kBTHD, B, G, T, dv);
  args.o = AttentionView(to, DType::kF32, Layout::kBTHD, B, H, T, dv);
  args.lse = ContiguousView(tlse, DType::kF32, {B, H, T});
  args.sinks = weights_.sinks.view();
  args.alibi_slopes = weights_.alibi_slopes.view();
  ATTNKIT_RETURN_IF_ERROR(runner_->Run(tp, args, &last_run_));
  Linear(ContiguousView(to, DType::kF32, {B, T, Hdv}), weights_.wo, weights_.bo,
         static_cast<float*>(y.data), &y);
  train_problem_ = tp;
  train_backend_ = backend;
  has_train_state_ = true;
  return absl::OkStatus();
}

absl::Status MultiHeadAttention::Backward(const TensorView& dy, const TensorView& dx) {
  if (!has_train_state_) {
    return absl::FailedPreconditionError(
        "Backward needs the activations of a successful ForwardTrain; call ForwardTrain first");
  }
  const AttentionProblem& tp = train_problem_;
  const int64_t B = tp.batch, T = tp.q_len, D = tp.model_dim, H = tp.num_heads, G = tp.num_kv_heads,
                d = tp.head_dim;
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("dy", dy, D));
  ATTNKIT_RETURN_IF_ERROR(CheckActivations("dx", dx, D));
  for (const TensorView* t : {&dy, &dx}) {
    if (t->shape[0] != B || t->shape[1] != T) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has shape %s; the last ForwardTrain had x [%d, %d, %d]",
                          t == &dy ? "dy" : "dx", ShapeString(*t), B, T, D));
    }
  }
  const int64_t dv = tp.value_dim();  // V, O, dO, dV
  const int64_t M = B * T, Hd = H * d, Gd = G * d, Hdv = H * dv, Gdv = G * dv;
  const MatmulProvider& mm = *matmul_;
  // The forward's buffers, as ForwardTrain left them.
  ATTNKIT_ASSIGN_OR_RETURN(float* tx, tx_ws_.Get(M * D));
  ATTNKIT_ASSIGN_OR_RETURN(float* tq, tq_ws_.Get(M * Hd));
  ATTNKIT_ASSIGN_OR_RETURN(float* tk, tk_ws_.Get(M * Gd));
  ATTNKIT_ASSIGN_OR_RETURN(float* tv, tv_ws_.Get(M * Gdv));
  ATTNKIT_ASSIGN_OR_RETURN(float* to, to_ws_.Get(M * Hdv));
  ATTNKIT_ASSIGN_OR_RETURN(float* tlse, tlse_ws_.Get(B * H * T));
  ATTNKIT_ASSIGN_OR_RETURN(float* g_o, do_ws_.Get(M * Hdv));
  ATTNKIT_ASSIGN_OR_RETURN(float* g_q, dq_ws_.Get(M * Hd));
  ATTNKIT_ASSIGN_OR_RETURN(float* g_k, dk_ws_.Get(M * Gd));
  ATTNKIT_ASSIGN_OR_RETURN(float* g_v, dv_ws_.Get(M * Gdv));

  // y = O Wo^T + bo: dO = dy Wo, dWo += dy^T O, dbo += sum dy.
  int64_t ldy = RowStride(dy);
  const float* dyp = static_cast<const float*>(dy.data);
  if (ldy < 0) {
    ATTNKIT_ASSIGN_OR_RETURN(float* buf, dy_ws_.Get(M * D));
    GatherRows(dy, buf);
    dyp = buf;
    ldy = D;
  }
  mm.LinearGradInput(dyp, ldy, Data(weights_.wo), M, D, Hdv, g_o, Hdv, /*accumulate=*/false);
  mm.LinearGradWeight(dyp, ldy, to, Hdv, M, D, Hdv, Data(grads_.wo), Data(grads_.bo));

  // dQ, dK, dV through the backend that ran the forward (dy is not read
  // again from here on, so dx may be dy).
  AttentionArgs args;
  args.q = AttentionView(tq, DType::kF32, Layout::kBTHD, B, H, T, d);
  args.k = AttentionView(tk, DType::kF32, Layout::kBTHD, B, G, T, d);
  args.v = AttentionView(tv, DType::kF32, Layout::kBTHD, B, G, T, dv);
  args.o = AttentionView(to, DType::kF32, Layout::kBTHD, B, H, T, dv);
  args.lse = ContiguousView(tlse, DType::kF32, {B, H, T});
  args.sinks = weights_.sinks.view();
  args.alibi_slopes = weights_.alibi_slopes.view();
  GradArgs grads;
  grads.d_o = AttentionView(g_o, DType::kF32, Layout::kBTHD, B, H, T, dv);
  grads.dq = AttentionView(g_q, DType::kF32, Layout::kBTHD, B, H, T, d);
  grads.dk = AttentionView(g_k, DType::kF32, Layout::kBTHD, B, G, T, d);
  grads.dv = AttentionView(g_v, DType::kF32, Layout::kBTHD, B, G, T, dv);
  // dsinks: written by the backend, then added to the accumulated gradient.
  float* dsinks = nullptr;
  if (tp.sinks) {
    ATTNKIT_ASSIGN_OR_RETURN(dsinks, dsinks_ws_.Get(H));
    grads.dsinks = ContiguousView(dsinks, DType::kF32, {H});
  }
  ATTNKIT_RETURN_IF_ERROR(train_backend_->Backward(tp, args, grads, &last_backward_run_));
  ATTNKIT_RETURN_IF_ERROR(train_backend_->Synchronize());
  if (tp.sinks) {
    float* acc = Data(grads_.sinks);
    for (int64_t h = 0; h < H; ++h) acc[h] += dsinks[h];
  }

  // Q = x Wq^T + bq (K, V likewise): dW += dQ^T x, dx = dQ Wq + dK Wk + dV Wv.
  mm.LinearGradWeight(g_q, Hd, tx, D, M, Hd, D, Data(grads_.wq), Data(grads_.bq));
  mm.LinearGradWeight(g_k, Gd, tx, D, M, Gd, D, Data(grads_.wk), Data(grads_.bk));
  mm.LinearGradWeight(g_v, Gdv, tx, D, M, Gdv, D, Data(grads_.wv), Data(grads_.bv));
  int64_t ldx = RowStride(dx);
  float* dxp = static_cast<float*>(dx.data);
  if (ldx < 0) {
    ATTNKIT_ASSIGN_OR_RETURN(dxp, dx_ws_.Get(M * D));
    ldx = D;
  }
  mm.LinearGradInput(g_q, Hd, Data(weights_.wq), M, Hd, D, dxp, ldx, /*accumulate=*/false);
  mm.LinearGradInput(g_k, Gd, Data(weights_.wk), M, Gd, D, dxp, ldx, /*accumulate=*/true);
  mm.LinearGradInput(g_v, Gdv, Data(weights_.wv), M, Gdv, D, dxp, ldx, /*accumulate=*/true);
  if (dxp != dx.data) ScatterRows(dxp, dx);
  return absl::OkStatus();
}

}  // namespace attnkit

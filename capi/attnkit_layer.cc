// The C API's layer and KV cache (include/attnkit/attnkit.h) over
// ops::MultiHeadAttention and ops::KVCache.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "attnkit/attnkit.h"
#include "capi/internal.h"
#include "core/status_macros.h"
#include "io/proto_json.h"
#include "ops/kv_cache.h"
#include "ops/multi_head_attention.h"

struct attnkit_layer {
  std::unique_ptr<attnkit::MultiHeadAttention> mha;
};

struct attnkit_kv_cache {
  attnkit::KVCache cache;
};

namespace attnkit::capi {
namespace {

std::string Shape(const TensorView& t) {
  return absl::StrCat("[", absl::StrJoin(absl::MakeConstSpan(t.shape.data(), t.rank), ", "), "]");
}

absl::StatusOr<TensorView> ViewOf(const attnkit_tensor* t, const char* what) {
  ATTNKIT_RETURN_IF_ERROR(RequireNonNull(t, what));
  return TensorFromC(*t, what);
}

// A KV cache's storage type from the C enum: f32, f16, bf16 or i8.
absl::StatusOr<DType> CacheDType(int32_t dtype) {
  switch (dtype) {
    case ATTNKIT_F32:
      return DType::kF32;
    case ATTNKIT_F16:
      return DType::kF16;
    case ATTNKIT_BF16:
      return DType::kBF16;
    case ATTNKIT_I8:
      return DType::kI8;
    case ATTNKIT_F8E4M3:
      return DType::kF8E4M3;
    case ATTNKIT_F8E5M2:
      return DType::kF8E5M2;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype (", dtype,
                       ") must be ATTNKIT_F32, ATTNKIT_F16, ATTNKIT_BF16, ATTNKIT_I8, "
                       "ATTNKIT_F8E4M3 or ATTNKIT_F8E5M2"));
  }
}

// The weight `name` of the layer ("wq" ... "bo"); NotFound otherwise.
absl::StatusOr<const Tensor*> WeightOf(const MultiHeadAttention& mha, const std::string& name) {
  const AttentionWeights& w = mha.weights();
  const std::pair<const char*, const Tensor*> slots[] = {
      {"wq", &w.wq}, {"wk", &w.wk}, {"wv", &w.wv}, {"wo", &w.wo},
      {"bq", &w.bq}, {"bk", &w.bk}, {"bv", &w.bv}, {"bo", &w.bo},
  };
  for (const auto& slot : slots) {
    if (name == slot.first) {
      if (slot.second->view().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": the layer has no bias"));
      }
      return slot.second;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no weight '", name, "'; the layer has wq, wk, wv, wo (and bq, bk, bv, bo)"));
}

void FillResult(const MultiHeadAttention& mha, attnkit_run_result* result) {
  if (result == nullptr) return;
  CopyString(mha.last_run().backend, result->backend, sizeof(result->backend));
  CopyString(mha.last_run().kernel, result->kernel, sizeof(result->kernel));
  CopyString(mha.selection_reason(), result->reason, sizeof(result->reason));
  result->workspace_allocations = mha.last_run().workspace_allocations;
}

absl::Status RequireResult(const attnkit_run_result* result) {
  if (result == nullptr) return absl::OkStatus();
  return RequireStructSize(result->struct_size,
                           offsetof(attnkit_run_result, workspace_allocations) + sizeof(int64_t),
                           "attnkit_run_result");
}

}  // namespace
}  // namespace attnkit::capi

using attnkit::capi::Guard;
using attnkit::capi::RequireNonNull;

extern "C" {

int32_t attnkit_layer_create(attnkit_context* ctx, const char* config_json, int32_t bias,
                             uint64_t seed, attnkit_layer** out, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(out, "out"));
    *out = nullptr;
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireContext(ctx));
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(config_json, "config_json"));
    attnkit::AttentionConfig config;
    ATTNKIT_RETURN_IF_ERROR(attnkit::ProtoFromJson(config_json, "config_json", &config));
    attnkit::LayerOptions options;
    options.bias = bias != 0;
    options.seed = seed;
    auto layer = std::make_unique<attnkit_layer>();
    ATTNKIT_ASSIGN_OR_RETURN(layer->mha,
                             attnkit::MultiHeadAttention::Create(config, options, ctx->registry));
    *out = layer.release();
    return absl::OkStatus();
  });
}

void attnkit_layer_destroy(attnkit_layer* layer) { delete layer; }

int32_t attnkit_layer_set_weight(attnkit_layer* layer, const char* name,
                                 const attnkit_tensor* value, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(name, "name"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView v, attnkit::capi::ViewOf(value, name));
    return layer->mha->SetWeight(name, v);
  });
}

int32_t attnkit_layer_get_weight(const attnkit_layer* layer, const char* name,
                                 const attnkit_tensor* out, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(name, "name"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::Tensor* w, attnkit::capi::WeightOf(*layer->mha, name));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView dst, attnkit::capi::ViewOf(out, "out"));
    const attnkit::TensorView& src = w->view();  // f32, contiguous, rank 1 or 2
    bool same = dst.rank == src.rank && dst.dtype == attnkit::DType::kF32;
    for (int i = 0; same && i < src.rank; ++i) same = dst.shape[i] == src.shape[i];
    if (!same) {
      return absl::InvalidArgumentError(
          absl::StrFormat("out must be f32 %s for %s; got %s %s", attnkit::capi::Shape(src), name,
                          attnkit::DTypeName(dst.dtype), attnkit::capi::Shape(dst)));
    }
    const int64_t rows = src.rank == 2 ? src.shape[0] : 1;
    const int64_t cols = src.shape[src.rank - 1];
    const float* from = static_cast<const float*>(src.data);
    float* to = static_cast<float*>(dst.data);
    const int64_t row_stride = src.rank == 2 ? dst.strides[0] : 0;
    const int64_t col_stride = dst.strides[src.rank - 1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) to[r * row_stride + c * col_stride] = from[r * cols + c];
    }
    return absl::OkStatus();
  });
}

int32_t attnkit_layer_forward(attnkit_layer* layer, const attnkit_tensor* x,
                              const attnkit_tensor* context, const attnkit_tensor* y,
                              attnkit_run_result* result, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireResult(result));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView xv, attnkit::capi::ViewOf(x, "x"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView yv, attnkit::capi::ViewOf(y, "y"));
    if (context == nullptr) {
      ATTNKIT_RETURN_IF_ERROR(layer->mha->Forward(xv, yv));
    } else {
      ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView cv,
                               attnkit::capi::ViewOf(context, "context"));
      ATTNKIT_RETURN_IF_ERROR(layer->mha->CrossForward(xv, cv, yv));
    }
    attnkit::capi::FillResult(*layer->mha, result);
    return absl::OkStatus();
  });
}

int32_t attnkit_kv_cache_create(const attnkit_layer* layer, int64_t batch, int64_t capacity,
                                int32_t dtype, attnkit_kv_cache** out, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(out, "out"));
    *out = nullptr;
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::DType d, attnkit::capi::CacheDType(dtype));
    auto cache = std::make_unique<attnkit_kv_cache>();
    ATTNKIT_ASSIGN_OR_RETURN(cache->cache, layer->mha->NewCache(batch, capacity, d));
    *out = cache.release();
    return absl::OkStatus();
  });
}

int32_t attnkit_kv_cache_create_paged(const attnkit_layer* layer, int64_t batch, int64_t page_size,
                                      int64_t num_pages, int32_t dtype, attnkit_kv_cache** out,
                                      char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(out, "out"));
    *out = nullptr;
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::DType d, attnkit::capi::CacheDType(dtype));
    auto cache = std::make_unique<attnkit_kv_cache>();
    ATTNKIT_ASSIGN_OR_RETURN(cache->cache,
                             layer->mha->NewPagedCache(batch, page_size, num_pages, d));
    *out = cache.release();
    return absl::OkStatus();
  });
}

int32_t attnkit_kv_cache_fork(attnkit_kv_cache* cache, int64_t src, int64_t dst, int64_t tokens,
                              char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(cache, "cache"));
    return cache->cache.Fork(src, dst, tokens);
  });
}

void attnkit_kv_cache_destroy(attnkit_kv_cache* cache) { delete cache; }

int32_t attnkit_layer_forward_cached(attnkit_layer* layer, const attnkit_tensor* x,
                                     attnkit_kv_cache* cache, const attnkit_tensor* y,
                                     attnkit_run_result* result, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(layer, "layer"));
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(cache, "cache"));
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireResult(result));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView xv, attnkit::capi::ViewOf(x, "x"));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::TensorView yv, attnkit::capi::ViewOf(y, "y"));
    ATTNKIT_RETURN_IF_ERROR(layer->mha->ForwardCached(xv, &cache->cache, yv));
    attnkit::capi::FillResult(*layer->mha, result);
    return absl::OkStatus();
  });
}

int32_t attnkit_kv_cache_info(const attnkit_kv_cache* cache, int64_t* batch, int64_t* capacity,
                              int64_t* bytes, int64_t* lengths, int64_t lengths_size, char* err,
                              size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(cache, "cache"));
    const attnkit::KVCache& c = cache->cache;
    if (batch != nullptr) *batch = c.batch();
    if (capacity != nullptr) *capacity = c.capacity();
    if (bytes != nullptr) *bytes = c.bytes();
    if (lengths != nullptr) {
      if (lengths_size < c.batch()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "lengths_size (%d) is smaller than the cache's batch (%d)", lengths_size, c.batch()));
      }
      for (int64_t b = 0; b < c.batch(); ++b) lengths[b] = c.length(b);
    }
    return absl::OkStatus();
  });
}

int32_t attnkit_kv_cache_set_lengths(attnkit_kv_cache* cache, const int64_t* lengths, int64_t count,
                                     char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireNonNull(cache, "cache"));
    if (count > 0) ATTNKIT_RETURN_IF_ERROR(RequireNonNull(lengths, "lengths"));
    if (count < 0) return absl::InvalidArgumentError(absl::StrCat("count (", count, ") < 0"));
    return cache->cache.SetLengths(std::vector<int64_t>(lengths, lengths + count));
  });
}

}  // extern "C"

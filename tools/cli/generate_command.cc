// `attnkit generate`: autoregressive decoding through a stack of attention
// layers with KV caches (dense, or paged with --paged; the config's kv_dtype
// storage, int8 included), timed, then checked against a full recompute.
//
// There is no vocabulary: the next input is the last layer's output at the
// previous position, RMS-normalised, x[t+1] = h(t) / rms(h(t)), so every
// decode step depends on the one before, as in a real model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/problem_data.h"
#include "io/json_writer.h"
#include "io/proto_json.h"
#include "ops/multi_head_attention.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Tokens [t0, t0 + n) of every sequence of a [B, T, D] buffer.
TensorView Tokens(std::vector<float>& buf, int64_t B, int64_t T, int64_t D, int64_t t0, int64_t n) {
  TensorView v = ContiguousView(buf.data() + t0 * D, DType::kF32, {B, n, D});
  v.strides[0] = T * D;
  return v;
}

// h += layer(h) for every layer, on the tokens of `h` (a [B, n, D] view);
// with caches when `caches` is non-null. `tmp` is [B, n, D] scratch.
absl::Status RunStack(std::vector<std::unique_ptr<MultiHeadAttention>>& layers,
                      std::vector<KVCache>* caches, const TensorView& h, std::vector<float>* tmp) {
  const int64_t B = h.shape[0], n = h.shape[1], D = h.shape[2];
  const TensorView t = ContiguousView(tmp->data(), DType::kF32, {B, n, D});
  for (size_t l = 0; l < layers.size(); ++l) {
    if (caches != nullptr) {
      ATTNKIT_RETURN_IF_ERROR(layers[l]->ForwardCached(h, &(*caches)[l], t));
    } else {
      ATTNKIT_RETURN_IF_ERROR(layers[l]->Forward(h, t));
    }
    auto* hd = static_cast<float*>(h.data);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        float* row = hd + b * h.strides[0] + i * h.strides[1];
        const float* add = tmp->data() + (b * n + i) * D;
        for (int64_t c = 0; c < D; ++c) row[c] += add[c];
      }
    }
  }
  return absl::OkStatus();
}

// dst = src / rms(src), one row of D.
void RmsNormalise(const float* src, int64_t D, float* dst) {
  double ss = 0;
  for (int64_t c = 0; c < D; ++c) ss += double(src[c]) * src[c];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / D + 1e-6));
  for (int64_t c = 0; c < D; ++c) dst[c] = src[c] * inv;
}

// FNV-1a over the bytes of `v`, as 16 hex digits.
std::string Digest(const std::vector<float>& v) {
  uint64_t hash = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

// How each layer's cache stores T tokens of B sequences.
struct CachePlan {
  bool paged = false;
  int64_t page_size = 0;  // paged: tokens per page
  int64_t num_pages = 0;  // paged: pages in each layer's pool
};

// Paged with --paged or a config that sets page_size; the page size is
// --page_size, else the config's, else 16; the pool is the config's
// num_pages, else just enough: B * ceil(T / page_size).
absl::StatusOr<CachePlan> PlanCache(const GenerateOptions& gen, const AttentionConfig& config,
                                    int64_t B, int64_t T) {
  CachePlan plan;
  plan.paged = gen.paged || config.page_size() > 0;
  if (!plan.paged) {
    if (gen.page_size != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--page_size (%d) sets the page of a paged KV cache: add --paged", gen.page_size));
    }
    if (config.num_pages() != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("num_pages (%d) sizes a paged KV cache: add --paged or set page_size",
                          config.num_pages()));
    }
    return plan;
  }
  if (gen.page_size != 0 && (gen.page_size < kMinPageSize || gen.page_size > kMaxPageSize ||
                             (gen.page_size & (gen.page_size - 1)) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--page_size (%d) must be a power of two in [%d, %d]", gen.page_size,
                        kMinPageSize, kMaxPageSize));
  }
  plan.page_size = gen.page_size != 0        ? gen.page_size
                   : config.page_size() != 0 ? config.page_size()
                                             : kMinPageSize;
  plan.num_pages = config.num_pages() != 0 ? config.num_pages()
                                           : B * ((T + plan.page_size - 1) / plan.page_size);
  return plan;
}

}  // namespace

absl::Status GenerateCommand(const BackendRegistry& registry, const CliOptions& options,
                             const GenerateOptions& gen, std::ostream& json_out) {
  // With --json=- the report is the only thing printed.
  std::ostringstream discard;
  std::ostream& out = JsonToStdout(options) ? discard : json_out;
  const struct {
    const char* flag;
    int64_t value, min;
  } checks[] = {{"layers", options.layers, 1},
                {"prompt_len", gen.prompt_len, 1},
                {"new_tokens", gen.new_tokens, 0},
                {"chunk", gen.chunk, 0}};
  for (const auto& c : checks) {
    if (c.value < c.min) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s (%d) must be >= %d", c.flag, c.value, c.min));
    }
  }
  ATTNKIT_ASSIGN_OR_RETURN(AttentionConfig config, LoadCliConfig(options));
  if (!options.backend.empty()) config.set_backend(options.backend);
  bool mask_defaulted = false;
  switch (config.mask().kind()) {
    case MaskSpec::KIND_UNSPECIFIED:
      config.mutable_mask()->set_kind(MaskSpec::CAUSAL);
      mask_defaulted = true;
      break;
    case MaskSpec::NONE:
      return absl::InvalidArgumentError(
          "generate decodes one token after another: mask.kind must be CAUSAL or "
          "SLIDING_WINDOW, not NONE");
    default:
      break;
  }
  if (config.alignment() == TOP_LEFT) {
    return absl::InvalidArgumentError(
        "generate needs alignment BOTTOM_RIGHT (each new token sees every cached one), not "
        "TOP_LEFT");
  }
  config.set_alignment(BOTTOM_RIGHT);
  // The cache stores kv_dtype (int8 and fp8 with a scale per token and KV
  // head); the layers compute in f32.
  const DType cache_dtype = config.kv_dtype() == F16        ? DType::kF16
                            : config.kv_dtype() == BF16     ? DType::kBF16
                            : config.kv_dtype() == INT8     ? DType::kI8
                            : config.kv_dtype() == FP8_E4M3 ? DType::kF8E4M3
                            : config.kv_dtype() == FP8_E5M2 ? DType::kF8E5M2
                            : config.dtype() == F16         ? DType::kF16
                            : config.dtype() == BF16        ? DType::kBF16
                                                            : DType::kF32;
  const int64_t B = std::max<int64_t>(1, config.batch()), P = gen.prompt_len, K = gen.new_tokens,
                T = P + K;
  ATTNKIT_ASSIGN_OR_RETURN(const CachePlan plan, PlanCache(gen, config, B, T));
  config.set_dtype(F32);
  config.set_kv_dtype(F32);
  config.clear_kv_lengths();
  config.clear_q_lengths();
  config.clear_page_size();  // the caches are paged, not the layers' own problems
  config.clear_num_pages();
  config.set_return_lse(false);

  const int64_t chunk = gen.chunk == 0 ? P : std::min(gen.chunk, P);
  std::vector<std::unique_ptr<MultiHeadAttention>> layers;
  std::vector<KVCache> caches;
  if (options.threads > 0) {
    for (Backend* b : registry.All()) {
      if (b->UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(b->SetNumThreads(options.threads));
    }
  }
  for (int64_t l = 0; l < options.layers; ++l) {
    LayerOptions lo;
    lo.seed = config.seed() * 1000 + static_cast<uint64_t>(l);
    lo.threads = options.threads;
    ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<MultiHeadAttention> layer,
                             MultiHeadAttention::Create(config, lo, registry));
    ATTNKIT_ASSIGN_OR_RETURN(
        KVCache cache, plan.paged
                           ? layer->NewPagedCache(B, plan.page_size, plan.num_pages, cache_dtype)
                           : layer->NewCache(B, T, cache_dtype));
    layers.push_back(std::move(layer));
    caches.push_back(std::move(cache));
  }
  const AttentionProblem& p = layers[0]->problem();
  const int64_t D = p.model_dim;
  const int64_t cache_bytes = caches[0].bytes() * options.layers;
  out << absl::StrFormat(
      "generate: %d layers, %s (%d query heads, %d kv heads, head_dim %d, model_dim %d), "
      "batch %d\n",
      options.layers, p.Variant(), p.num_heads, p.num_kv_heads, p.head_dim, D, B);
  if (mask_defaulted) {
    out << "mask               causal (the config sets none; generation needs a causal mask)\n";
  }
  out << absl::StrFormat("backend            %s; matmul %s\n",
                         layers[0]->is_auto() ? "auto, chosen per call (prefill and decode below)"
                                              : layers[0]->backend()->Name(),
                         layers[0]->matmul().Name());
  const std::string cache_shape =
      plan.paged ? absl::StrFormat("paged: %d pages of %d tokens", plan.num_pages, plan.page_size)
                 : absl::StrFormat("%d tokens", T);
  out << absl::StrFormat("kv cache           %d B (%.4g MiB) = %d layers x %d B (%s, %s)\n",
                         cache_bytes, double(cache_bytes) / (1 << 20), options.layers,
                         caches[0].bytes(), DTypeName(cache_dtype), cache_shape);

  // Inputs of every position: the prompt from the seed, the rest generated.
  std::vector<float> inputs(B * T * D), h(B * T * D), tmp(B * std::max<int64_t>(chunk, 1) * D);
  for (int64_t b = 0; b < B; ++b) {
    FillUniform(ContiguousView(inputs.data() + b * T * D, DType::kF32, {P, D}),
                config.seed() * 7 + 1 + b, -1.0f, 1.0f);
  }
  std::copy(inputs.begin(), inputs.end(), h.begin());

  const Clock::time_point t0 = Clock::now();
  for (int64_t s = 0; s < P; s += chunk) {
    const int64_t n = std::min(chunk, P - s);
    ATTNKIT_RETURN_IF_ERROR(RunStack(layers, &caches, Tokens(h, B, T, D, s, n), &tmp));
  }
  const Clock::time_point t1 = Clock::now();
  const std::string prefill_backend = layers[0]->backend()->Name();
  const std::string prefill_kernel = layers[0]->last_run().kernel;
  const std::string prefill_reason = layers[0]->selection_reason();
  for (int64_t t = P; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      float* next = inputs.data() + (b * T + t) * D;
      RmsNormalise(h.data() + (b * T + t - 1) * D, D, next);
      std::copy(next, next + D, h.data() + (b * T + t) * D);
    }
    ATTNKIT_RETURN_IF_ERROR(RunStack(layers, &caches, Tokens(h, B, T, D, t, 1), &tmp));
  }
  const Clock::time_point t2 = Clock::now();
  const double prefill_s = Seconds(t0, t1), decode_s = Seconds(t1, t2);
  out << absl::StrFormat("prefill            %d tokens in chunks of %d: %.3f s, %.1f tokens/s\n",
                         B * P, chunk, prefill_s, B * P / prefill_s);
  out << absl::StrFormat("  on %s [%s]\n  why: %s\n", prefill_backend, prefill_kernel,
                         prefill_reason);
  const int64_t pages_in_use = plan.paged ? plan.num_pages - caches[0].free_pages() : 0;
  if (plan.paged) {
    out << absl::StrFormat("kv pages           %d of %d in use per layer after %d tokens\n",
                           pages_in_use, plan.num_pages, T);
  }
  if (K > 0) {
    out << absl::StrFormat("decode             %d steps: %.3f s, %.2f tokens/s (%.2f ms/step)\n", K,
                           decode_s, B * K / decode_s, 1e3 * decode_s / K);
    out << absl::StrFormat("  on %s [%s]\n  why: %s\n", layers[0]->backend()->Name(),
                           layers[0]->last_run().kernel, layers[0]->selection_reason());
  }
  // The report (--json), finished below when the recompute runs.
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Key("config").Raw(ProtoToJson(ConfigForReport(config)));
  w.Field("layers", options.layers).Field("batch", B).Field("prompt_len", P);
  w.Field("new_tokens", K).Field("chunk", chunk);
  w.Field("kv_cache_dtype", DTypeName(cache_dtype)).Field("kv_cache_bytes", cache_bytes);
  w.Field("kv_cache_paged", plan.paged).Field("page_size", plan.page_size);
  w.Field("num_pages", plan.num_pages).Field("pages_in_use", pages_in_use);
  // Equal digests: the same hidden state at every position, bit for bit
  // (a paged cache against a dense one, say).
  w.Field("hidden_digest", Digest(h));
  w.Field("mask_defaulted_to_causal", mask_defaulted);
  w.Key("prefill").BeginObject();
  w.Field("tokens", B * P).Field("seconds", prefill_s).Field("tokens_per_s", B * P / prefill_s);
  w.Field("backend", prefill_backend).Field("kernel", prefill_kernel);
  w.Field("reason", prefill_reason);
  w.EndObject();
  w.Key("decode").BeginObject();
  w.Field("steps", K).Field("seconds", decode_s);
  w.Field("tokens_per_s", K > 0 ? B * K / decode_s : 0.0);
  w.Field("backend", K > 0 ? layers[0]->backend()->Name() : "");
  w.Field("kernel", K > 0 ? layers[0]->last_run().kernel : "");
  w.Field("reason", K > 0 ? layers[0]->selection_reason() : "");
  w.EndObject();
  if (!gen.verify) {
    w.Key("verify").Null();
    w.EndObject();
    return EmitJson(options, w.str(), json_out);
  }

  // The whole sequence again, no cache: the last hidden state must agree.
  std::vector<float> full = inputs, full_tmp(B * T * D);
  const Clock::time_point t3 = Clock::now();
  ATTNKIT_RETURN_IF_ERROR(RunStack(layers, nullptr, Tokens(full, B, T, D, 0, T), &full_tmp));
  const double recompute_s = Seconds(t3, Clock::now());
  double max_err = 0, max_ref = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < D; ++c) {
      const int64_t i = (b * T + T - 1) * D + c;
      max_err = std::max(max_err, double(std::fabs(h[i] - full[i])));
      max_ref = std::max(max_ref, double(std::fabs(full[i])));
    }
  }
  // f32 differs only by summation order; a 16-bit cache rounds K and V, an
  // int8 one quantizes them (by up to 1/254 of each row's largest value), an
  // fp8 one rounds each to 3 (E4M3) or 2 (E5M2) mantissa bits (2^-4 and 2^-3
  // relative).
  const double tol = (cache_dtype == DType::kF32      ? 1e-4
                      : cache_dtype == DType::kF16    ? 1e-2
                      : cache_dtype == DType::kF8E4M3 ? 1e-1
                      : cache_dtype == DType::kF8E5M2 ? 2e-1
                                                      : 5e-2) *
                     std::max(1.0, max_ref);
  const bool ok = max_err <= tol;
  out << absl::StrFormat(
      "verify             last hidden state vs full recompute (%.3f s): max abs err %.3g "
      "(max |h| %.3g, tolerance %.3g): %s\n",
      recompute_s, max_err, max_ref, tol, ok ? "ok" : "MISMATCH");
  w.Key("verify").BeginObject();
  w.Field("seconds", recompute_s).Field("max_abs_err", max_err).Field("max_abs_h", max_ref);
  w.Field("tolerance", tol).Field("ok", ok);
  w.EndObject();
  w.EndObject();
  ATTNKIT_RETURN_IF_ERROR(EmitJson(options, w.str(), json_out));
  if (!ok) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "decoding with the KV cache differs from the full recompute by %g (tolerance %g)", max_err,
        tol));
  }
  return absl::OkStatus();
}

}  // namespace attnkit

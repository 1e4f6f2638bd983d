// The tensors of `run` and `verify` from .npy files.
#include "tools/cli/npy_problem.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "io/config_io.h"
#include "io/npy.h"
#include "tools/cli/config_flags.h"

namespace attnkit {
namespace {

// The file shape of a [B, heads, T, d] tensor in `layout`.
std::vector<int64_t> FileShape(Layout layout, int64_t b, int64_t heads, int64_t t, int64_t d) {
  if (layout == Layout::kBTHD) return {b, t, heads, d};
  return {b, heads, t, d};
}

}  // namespace

TensorView FileOrderView(TensorView v, Layout layout) {
  if (layout == Layout::kBTHD) {
    std::swap(v.shape[1], v.shape[2]);
    std::swap(v.strides[1], v.strides[2]);
  }
  return v;
}

namespace {

absl::Status ShapeError(const std::string& flag, const std::string& path,
                        const std::vector<int64_t>& got, const std::string& want) {
  return absl::InvalidArgumentError(absl::StrFormat("--%s=%s has shape (%s); expected %s", flag,
                                                    path, absl::StrJoin(got, ", "), want));
}

}  // namespace

absl::StatusOr<Tensor> LoadAttentionTensor(const std::string& flag, const std::string& path,
                                           DType dtype, Layout layout, int64_t b, int64_t heads,
                                           int64_t t, int64_t d, std::vector<std::string>* notes) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrFormat("--%s is required", flag));
  ATTNKIT_ASSIGN_OR_RETURN(NpyArray array, ReadNpy(path));
  if (array.converted_from == "float64" && notes != nullptr) {
    notes->push_back(absl::StrFormat("--%s=%s: float64 converted to float32 on load", flag, path));
  }
  const std::vector<int64_t> want = FileShape(layout, b, heads, t, d);
  if (array.shape != want) {
    return ShapeError(flag, path, array.shape,
                      absl::StrFormat("(%s) for layout %s", absl::StrJoin(want, ", "),
                                      LayoutName(layout) == "bhtd" ? "BHTD" : "BTHD"));
  }
  const TensorView& in = array.tensor.view();
  if (in.dtype != DType::kF32 && in.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s=%s holds %s; expected float32 or float16", flag, path, DTypeName(in.dtype)));
  }
  ATTNKIT_ASSIGN_OR_RETURN(Tensor out, Tensor::Attention(dtype, layout, b, heads, t, d));
  const int64_t n = in.NumElements();
  for (int64_t i = 0; i < n; ++i) StoreFromF32(out.data(), dtype, i, in.LoadF32(i));
  return out;
}

namespace {

// Loads a [B|1, H|1, Tq, Tk] (or [Tq, Tk]) mask or bias, broadcasting with
// zero strides.
absl::StatusOr<Tensor> LoadPairTensor(const std::string& flag, const std::string& path, DType dtype,
                                      const AttentionProblem& p) {
  ATTNKIT_ASSIGN_OR_RETURN(NpyArray array, ReadNpy(path));
  std::vector<int64_t> shape = array.shape;
  if (shape.size() == 2) shape.insert(shape.begin(), {1, 1});
  const std::string want = absl::StrFormat("(%d|1, %d|1, %d, %d) or (%d, %d)", p.batch, p.num_heads,
                                           p.q_len, p.kv_len, p.q_len, p.kv_len);
  if (shape.size() != 4 || (shape[0] != 1 && shape[0] != p.batch) ||
      (shape[1] != 1 && shape[1] != p.num_heads) || shape[2] != p.q_len || shape[3] != p.kv_len) {
    return ShapeError(flag, path, array.shape, want);
  }
  if (array.tensor.view().dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s=%s holds %s; expected %s", flag, path, DTypeName(array.tensor.view().dtype),
        dtype == DType::kU8 ? "bool or uint8" : "float32"));
  }
  TensorView v = ContiguousView(array.tensor.data(), dtype, shape);
  v.shape = {p.batch, p.num_heads, p.q_len, p.kv_len};
  if (shape[0] == 1) v.strides[0] = 0;
  if (shape[1] == 1) v.strides[1] = 0;
  Tensor t = std::move(array.tensor);
  ATTNKIT_RETURN_IF_ERROR(t.SetView(v));
  return t;
}

}  // namespace

absl::StatusOr<AttentionConfig> InferConfigFromArrays(const std::string& q_path,
                                                      const std::string& k_path,
                                                      const std::string& v_path) {
  if (q_path.empty() || k_path.empty()) {
    return absl::InvalidArgumentError(
        "without --config the shapes come from the arrays: pass --q and --k (and --v)");
  }
  ATTNKIT_ASSIGN_OR_RETURN(const NpyArray q, ReadNpy(q_path));
  ATTNKIT_ASSIGN_OR_RETURN(const NpyArray k, ReadNpy(k_path));
  if (q.shape.size() != 4 || k.shape.size() != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "without --config q and k must be 4-d ([B, H, T, d] or [B, T, H, d]); --q=%s is (%s), "
        "--k=%s is (%s)",
        q_path, absl::StrJoin(q.shape, ", "), k_path, absl::StrJoin(k.shape, ", ")));
  }
  if (q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--q (%s) and --k (%s) must agree on batch (dim 0) and head_dim (dim 3)",
                        absl::StrJoin(q.shape, ", "), absl::StrJoin(k.shape, ", ")));
  }
  // BHTD reads heads from dim 1, BTHD from dim 2.
  const auto divides = [](int64_t heads, int64_t kv_heads) {
    return kv_heads >= 1 && heads % kv_heads == 0;
  };
  const bool bhtd = divides(q.shape[1], k.shape[1]);
  const bool bthd = divides(q.shape[2], k.shape[2]);
  if (!bhtd && !bthd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--q (%s) and --k (%s): in neither layout do the KV heads divide the query heads; pass "
        "--config",
        absl::StrJoin(q.shape, ", "), absl::StrJoin(k.shape, ", ")));
  }
  const bool use_bhtd = bhtd && (!bthd || k.shape[1] <= k.shape[2]);
  const int heads_dim = use_bhtd ? 1 : 2, tokens_dim = use_bhtd ? 2 : 1;
  AttentionConfig c;
  c.set_name(absl::StrCat("inferred from ", q_path));
  c.set_batch(q.shape[0]);
  c.set_num_heads(q.shape[heads_dim]);
  c.set_num_kv_heads(k.shape[heads_dim]);
  c.set_q_len(q.shape[tokens_dim]);
  c.set_kv_len(k.shape[tokens_dim]);
  c.set_head_dim(q.shape[3]);
  c.set_layout(use_bhtd ? BHTD : BTHD);
  if (q.tensor.view().dtype == DType::kF16) c.set_dtype(F16);
  if (k.tensor.view().dtype == DType::kF16) c.set_kv_dtype(F16);
  if (c.q_len() != c.kv_len()) c.set_alignment(BOTTOM_RIGHT);
  c.mutable_mask()->set_kind(MaskSpec::NONE);
  // V's last dim is Ev (config.proto value_head_dim); a V that disagrees with
  // K elsewhere is reported when it is loaded against the inferred shape.
  if (!v_path.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(const NpyArray v, ReadNpy(v_path));
    if (v.shape.size() == 4 && v.shape[3] != q.shape[3]) c.set_value_head_dim(v.shape[3]);
  }
  return c;
}

absl::Status RequireDenseForNpy(const AttentionProblem& p) {
  if (!p.is_paged() && !p.is_ragged() && !IsScaledKv(p.kv_dtype)) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "%s is %s: .npy exchange (inputs, run, verify) covers dense float K/V only; check and "
      "compare run it on random data, and the library, the C API and ops::KVCache take its "
      "tensors",
      p.Id(),
      p.is_paged()    ? "paged (page_size)"
      : p.is_ragged() ? "ragged (q_lengths)"
                      : absl::StrCat(DTypeName(p.kv_dtype), " K/V (codes with scales)")));
}

absl::StatusOr<NpyProblem> LoadNpyProblem(const CliOptions& options, bool want_lse) {
  if (options.mask_convention != "attnkit" && options.mask_convention != "torch") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--mask_convention=%s: use attnkit (true = blocked) or torch (true = take part)",
        options.mask_convention));
  }
  std::string inferred;
  AttentionConfig config;
  if (options.config.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(config, InferConfigFromArrays(options.q, options.k, options.v));
    ATTNKIT_RETURN_IF_ERROR(ApplyConfigFlags(options.config_flags, "", &config));
    ATTNKIT_RETURN_IF_ERROR(ApplyComputeFlag(options, &config));
    inferred = ConfigToText(config);
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(config, LoadCliConfig(options));
  }
  if (config.blocked_mask() && options.mask.empty()) {
    return absl::InvalidArgumentError(
        "the config sets blocked_mask: true, so the mask is an input: pass --mask=FILE "
        "(bool/uint8 [B|1, H|1, Tq, Tk]), or drop blocked_mask from the config");
  }
  if (config.additive_bias() && options.bias.empty()) {
    return absl::InvalidArgumentError(
        "the config sets additive_bias: true, so the bias is an input: pass --bias=FILE "
        "(float32 [B|1, H|1, Tq, Tk]), or drop additive_bias from the config");
  }
  if (config.sinks() && options.sinks.empty()) {
    return absl::InvalidArgumentError(
        "the config sets sinks: true, so the sinks are an input: pass --sinks=FILE (float32 "
        "[H]), or drop sinks from the config");
  }
  if (!options.sinks.empty()) config.set_sinks(true);
  if (config.alibi() && options.alibi_slopes.empty()) {
    return absl::InvalidArgumentError(
        "the config sets alibi: true, so the slopes are an input: pass --alibi_slopes=FILE "
        "(float32 [H]), or drop alibi from the config");
  }
  if (!options.alibi_slopes.empty()) config.set_alibi(true);
  if (!options.backend.empty()) config.set_backend(options.backend);
  if (want_lse) config.set_return_lse(true);
  if (!options.mask.empty()) config.set_blocked_mask(true);
  if (!options.bias.empty()) config.set_additive_bias(true);
  ProblemData data;
  if (!options.kv_lengths.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(NpyArray lengths, ReadNpy(options.kv_lengths));
    const int64_t batch = config.batch() == 0 ? 1 : config.batch();
    if (lengths.shape != std::vector<int64_t>{batch} ||
        lengths.tensor.view().dtype != DType::kI32) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--kv_lengths=%s must be an int32 or int64 array of shape (%d,); it has %s shape (%s)",
          options.kv_lengths, batch, DTypeName(lengths.tensor.view().dtype),
          absl::StrJoin(lengths.shape, ", ")));
    }
    config.clear_kv_lengths();
    for (int64_t b = 0; b < batch; ++b) {
      config.add_kv_lengths(static_cast<const int32_t*>(lengths.tensor.data())[b]);
    }
    data.kv_lengths = std::move(lengths.tensor);
  }
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  ATTNKIT_RETURN_IF_ERROR(RequireDenseForNpy(p));
  // Before any tensor is loaded or allocated.
  ATTNKIT_RETURN_IF_ERROR(CheckMemoryBudget(p));
  if (p.has_kv_lengths() && data.kv_lengths.view().empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.kv_lengths, Tensor::Contiguous(DType::kI32, {p.batch}));
    for (int64_t b = 0; b < p.batch; ++b) {
      static_cast<int32_t*>(data.kv_lengths.data())[b] = static_cast<int32_t>(p.kv_lengths[b]);
    }
  }
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  std::vector<std::string> notes;
  ATTNKIT_ASSIGN_OR_RETURN(
      data.q, LoadAttentionTensor("q", options.q, p.dtype, p.layout, B, H, p.q_len, d, &notes));
  ATTNKIT_ASSIGN_OR_RETURN(
      data.k, LoadAttentionTensor("k", options.k, p.kv_dtype, p.layout, B, G, p.kv_len, d, &notes));
  ATTNKIT_ASSIGN_OR_RETURN(data.v, LoadAttentionTensor("v", options.v, p.kv_dtype, p.layout, B, G,
                                                       p.kv_len, p.value_dim(), &notes));
  if (p.blocked_mask) {
    ATTNKIT_ASSIGN_OR_RETURN(data.blocked_mask,
                             LoadPairTensor("mask", options.mask, DType::kU8, p));
    if (options.mask_convention == "torch") {
      // PyTorch's boolean attn_mask: true = take part; attnkit's: 1 = blocked.
      auto* m = static_cast<uint8_t*>(data.blocked_mask.data());
      int64_t n = 1;
      for (int i = 0; i < 4; ++i) {
        if (data.blocked_mask.view().strides[i] != 0) n *= data.blocked_mask.view().shape[i];
      }
      for (int64_t i = 0; i < n; ++i) m[i] = m[i] == 0 ? 1 : 0;
      notes.push_back(absl::StrFormat("--mask=%s read with the torch convention (true = take part)",
                                      options.mask));
    }
  }
  if (p.additive_bias) {
    ATTNKIT_ASSIGN_OR_RETURN(data.bias, LoadPairTensor("bias", options.bias, DType::kF32, p));
  }
  // One float32 value per query head: --sinks, --alibi_slopes.
  auto per_head = [H](absl::string_view flag, const std::string& path,
                      absl::string_view what) -> absl::StatusOr<Tensor> {
    ATTNKIT_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(path));
    if (a.shape != std::vector<int64_t>{H} || a.tensor.view().dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s=%s must be a float32 array of shape (%d,), one %s per query head; it has %s "
          "shape (%s)",
          flag, path, H, what, DTypeName(a.tensor.view().dtype), absl::StrJoin(a.shape, ", ")));
    }
    return std::move(a.tensor);
  };
  if (p.sinks) {
    ATTNKIT_ASSIGN_OR_RETURN(data.sinks, per_head("sinks", options.sinks, "logit"));
  }
  if (p.alibi) {
    ATTNKIT_ASSIGN_OR_RETURN(data.alibi_slopes,
                             per_head("alibi_slopes", options.alibi_slopes, "slope"));
  }
  ATTNKIT_ASSIGN_OR_RETURN(data.o,
                           Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, p.value_dim()));
  if (p.return_lse) {
    ATTNKIT_ASSIGN_OR_RETURN(data.lse, Tensor::Contiguous(DType::kF32, {B, H, p.q_len}));
  }

  return NpyProblem{p, std::move(data), std::move(inferred), std::move(notes)};
}

}  // namespace attnkit

#include "core/backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

template <typename T, typename NameFn>
std::string JoinNames(const std::vector<T>& items, NameFn name) {
  std::vector<std::string> names;
  for (const T& item : items) names.emplace_back(name(item));
  return absl::StrJoin(names, ", ");
}

template <typename T>
bool Contains(const std::vector<T>& items, const T& x) {
  return std::find(items.begin(), items.end(), x) != items.end();
}

std::string DTypeList(const std::vector<DType>& v) {
  return JoinNames(v, [](DType t) { return std::string(DTypeName(t)); });
}

// Expected [d0, d1, d2, d3] logical shape and dtype of one tensor argument.
absl::Status CheckTensor(absl::string_view name, const TensorView& t, DType dtype,
                         std::vector<int64_t> shape) {
  if (t.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is missing"));
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat("%s has dtype %s; the problem needs %s", name,
                                                      DTypeName(t.dtype), DTypeName(dtype)));
  }
  bool same = t.rank == static_cast<int>(shape.size());
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == shape[i];
  if (!same) {
    return absl::InvalidArgumentError(absl::StrFormat("%s has shape %s; the problem needs [%s]",
                                                      name, t.DebugString(),
                                                      absl::StrJoin(shape, ", ")));
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.strides[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has a negative stride (%s)", name, t.DebugString()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAbsent(absl::string_view name, const TensorView& t, absl::string_view flag) {
  if (!t.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s was given but the problem has %s off", name, flag));
  }
  return absl::OkStatus();
}

bool Overlaps(const TensorView& a, const TensorView& b) {
  if (a.empty() || b.empty()) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* a1 = a0 + a.SpanElements() * DTypeSize(a.dtype);
  const char* b0 = static_cast<const char*>(b.data);
  const char* b1 = b0 + b.SpanElements() * DTypeSize(b.dtype);
  return a0 < b1 && b0 < a1;
}

class HostBuffer : public DeviceBuffer {
 public:
  explicit HostBuffer(AlignedBuffer buffer) : buffer_(std::move(buffer)) {}
  void* data() const override { return buffer_.data(); }
  size_t size() const override { return buffer_.size(); }

 private:
  AlignedBuffer buffer_;
};

}  // namespace

std::string Capabilities::Describe() const {
  std::string out;
  absl::StrAppend(&out, "dtypes: ", DTypeList(dtypes), "; kv dtypes: ", DTypeList(kv_dtypes), "\n");
  if (head_dims.empty()) {
    absl::StrAppend(&out, "head dims: ", min_head_dim, "..", max_head_dim, "\n");
  } else {
    absl::StrAppend(&out, "head dims: ", absl::StrJoin(head_dims, ", "), "\n");
  }
  absl::StrAppend(
      &out, "masks: ", JoinNames(masks, [](MaskKind k) { return std::string(MaskKindName(k)); }),
      "; alignments: ",
      JoinNames(alignments, [](Alignment a) { return std::string(AlignmentName(a)); }),
      "; layouts: ", JoinNames(layouts, [](Layout l) { return std::string(LayoutName(l)); }), "\n");
  absl::StrAppend(&out, "group size (H/G): ",
                  max_group_size == 0 ? std::string("any") : absl::StrCat("<= ", max_group_size),
                  "\n");
  std::vector<std::string> extras;
  if (lse) extras.push_back("lse");
  if (kv_lengths) extras.push_back("kv_lengths");
  if (blocked_mask) extras.push_back("blocked_mask");
  if (additive_bias) extras.push_back("additive_bias");
  if (softcap) extras.push_back("softcap");
  if (paged_kv) extras.push_back("paged_kv");
  if (ragged) extras.push_back("ragged");
  if (sinks) extras.push_back("sinks");
  if (alibi) extras.push_back("alibi");
  if (value_head_dim) extras.push_back("value_head_dim");
  absl::StrAppend(&out, "extras: ", extras.empty() ? "none" : absl::StrJoin(extras, ", "), "\n");
  absl::StrAppend(&out, "compute: exact",
                  fast_kv_dtypes.empty()
                      ? std::string()
                      : absl::StrCat("; fast for kv dtypes ", DTypeList(fast_kv_dtypes)),
                  "\n");
  absl::StrAppend(&out, "deterministic: ",
                  deterministic ? "yes (bitwise, for a fixed thread count)" : "no", "\n");
  if (!backward.supported) {
    absl::StrAppend(&out, "backward: no\n");
    return out;
  }
  std::vector<std::string> bwd;
  if (backward.kv_lengths) bwd.push_back("kv_lengths");
  if (backward.blocked_mask) bwd.push_back("blocked_mask");
  if (backward.additive_bias) bwd.push_back("additive_bias");
  if (backward.bias_grad) bwd.push_back("dbias");
  if (backward.softcap) bwd.push_back("softcap");
  if (backward.ragged) bwd.push_back("ragged");
  if (backward.alibi) bwd.push_back("alibi");
  if (backward.sinks) bwd.push_back("sinks");
  if (backward.value_head_dim) bwd.push_back("value_head_dim");
  absl::StrAppend(
      &out, "backward: dtypes: ", DTypeList(backward.dtypes),
      "; kv dtypes: ", DTypeList(backward.kv_dtypes), "; masks: ",
      JoinNames(backward.masks, [](MaskKind k) { return std::string(MaskKindName(k)); }),
      "; extras: ", bwd.empty() ? "none" : absl::StrJoin(bwd, ", "),
      backward.deterministic ? "; deterministic" : "", "\n");
  return out;
}

absl::Status CheckCapabilities(const Capabilities& c, const AttentionProblem& p) {
  auto unsupported = [](absl::string_view what, absl::string_view asked,
                        absl::string_view supported) {
    return absl::UnimplementedError(
        absl::StrFormat("%s %s is not supported; supported: %s", what, asked, supported));
  };
  if (!Contains(c.dtypes, p.dtype)) {
    return unsupported("dtype", DTypeName(p.dtype), DTypeList(c.dtypes));
  }
  if (!Contains(c.kv_dtypes, p.kv_dtype)) {
    return unsupported("kv_dtype", DTypeName(p.kv_dtype), DTypeList(c.kv_dtypes));
  }
  // FAST rounds Q to K's storage type (core/fast_compute.h): a backend takes
  // it for the K/V types it does so for. f32 K/V has nothing to round to, so
  // FAST is EXACT there and every backend takes it.
  if (p.fast() && p.kv_dtype != DType::kF32 && !Contains(c.fast_kv_dtypes, p.kv_dtype)) {
    return unsupported("compute FAST with kv_dtype", DTypeName(p.kv_dtype),
                       c.fast_kv_dtypes.empty() ? "exact only" : DTypeList(c.fast_kv_dtypes));
  }
  auto head_dim_ok = [&c](int64_t d) {
    return !c.head_dims.empty() ? Contains(c.head_dims, d)
                                : (d >= c.min_head_dim && d <= c.max_head_dim);
  };
  const std::string head_dims = c.head_dims.empty()
                                    ? absl::StrCat(c.min_head_dim, "..", c.max_head_dim)
                                    : absl::StrJoin(c.head_dims, ", ");
  if (!head_dim_ok(p.head_dim)) return unsupported("head_dim", absl::StrCat(p.head_dim), head_dims);
  if (p.has_value_dim()) {
    if (!c.value_head_dim) {
      return absl::UnimplementedError(absl::StrFormat(
          "value_head_dim (%d) != head_dim (%d) is not supported: this backend needs V's head "
          "dim equal to Q's and K's",
          p.value_dim(), p.head_dim));
    }
    if (!head_dim_ok(p.value_dim())) {
      return unsupported("value_head_dim", absl::StrCat(p.value_dim()), head_dims);
    }
  }
  if (!Contains(c.masks, p.mask)) {
    return unsupported("mask", MaskKindName(p.mask),
                       JoinNames(c.masks, [](MaskKind k) { return std::string(MaskKindName(k)); }));
  }
  if (p.mask != MaskKind::kNone && !Contains(c.alignments, p.alignment)) {
    return unsupported(
        "alignment", AlignmentName(p.alignment),
        JoinNames(c.alignments, [](Alignment a) { return std::string(AlignmentName(a)); }));
  }
  if (!Contains(c.layouts, p.layout)) {
    return unsupported("layout", LayoutName(p.layout),
                       JoinNames(c.layouts, [](Layout l) { return std::string(LayoutName(l)); }));
  }
  if (c.max_group_size > 0 && p.group_size() > c.max_group_size) {
    return unsupported("group size (num_heads / num_kv_heads)", absl::StrCat(p.group_size()),
                       absl::StrCat("<= ", c.max_group_size));
  }
  auto extra = [](bool asked, bool have, absl::string_view name) {
    return asked && !have ? absl::UnimplementedError(absl::StrCat(name, " is not supported"))
                          : absl::OkStatus();
  };
  ATTNKIT_RETURN_IF_ERROR(extra(p.return_lse, c.lse, "return_lse (log-sum-exp output)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.has_kv_lengths(), c.kv_lengths, "kv_lengths (padding)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.blocked_mask, c.blocked_mask, "blocked_mask (dense mask)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.additive_bias, c.additive_bias, "additive_bias"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.softcap > 0, c.softcap, "softcap"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.is_paged(), c.paged_kv, "paged K/V (page_size)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.is_ragged(), c.ragged, "ragged batches (q_lengths)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.sinks, c.sinks, "sinks (attention sinks)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.alibi, c.alibi, "alibi (ALiBi slopes)"));
  return absl::OkStatus();
}

absl::Status CheckBackwardCapabilities(const Capabilities& c, const AttentionProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(CheckCapabilities(c, p));
  const BackwardCapabilities& b = c.backward;
  if (!b.supported) return absl::UnimplementedError("the backward pass is not supported");
  auto unsupported = [](absl::string_view what, absl::string_view asked,
                        absl::string_view supported) {
    return absl::UnimplementedError(absl::StrFormat(
        "backward with %s %s is not supported; supported: %s", what, asked, supported));
  };
  if (!Contains(b.dtypes, p.dtype)) {
    return unsupported("dtype", DTypeName(p.dtype), DTypeList(b.dtypes));
  }
  if (!Contains(b.kv_dtypes, p.kv_dtype)) {
    return unsupported("kv_dtype", DTypeName(p.kv_dtype), DTypeList(b.kv_dtypes));
  }
  if (!Contains(b.masks, p.mask)) {
    return unsupported("mask", MaskKindName(p.mask),
                       JoinNames(b.masks, [](MaskKind k) { return std::string(MaskKindName(k)); }));
  }
  if (p.is_paged()) {
    return absl::UnimplementedError(
        "backward of paged K/V (page_size) is not supported: training keeps dense K/V");
  }
  auto extra = [](bool asked, bool have, absl::string_view name) {
    return asked && !have
               ? absl::UnimplementedError(absl::StrCat("backward with ", name, " is not supported"))
               : absl::OkStatus();
  };
  ATTNKIT_RETURN_IF_ERROR(extra(p.has_kv_lengths(), b.kv_lengths, "kv_lengths (padding)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.blocked_mask, b.blocked_mask, "blocked_mask (dense mask)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.additive_bias, b.additive_bias, "additive_bias"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.softcap > 0, b.softcap, "softcap"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.is_ragged(), b.ragged, "ragged batches (q_lengths)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.alibi, b.alibi, "alibi (ALiBi slopes)"));
  ATTNKIT_RETURN_IF_ERROR(extra(p.sinks, b.sinks, "sinks (attention sinks)"));
  ATTNKIT_RETURN_IF_ERROR(
      extra(p.has_value_dim(), b.value_head_dim, "value_head_dim != head_dim (Ev != E)"));
  return absl::OkStatus();
}

absl::Status ValidateArgs(const AttentionProblem& p, const AttentionArgs& a) {
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads;
  const int64_t d = p.head_dim, dv = p.value_dim(), Tq = p.q_len, Tk = p.kv_len;
  // Query side: [B, H, Tq, E], or packed [total_q, H, E]; O has Ev.
  const std::vector<int64_t> q_shape =
      p.is_ragged() ? std::vector<int64_t>{p.TotalQ(), H, d} : std::vector<int64_t>{B, H, Tq, d};
  const std::vector<int64_t> o_shape =
      p.is_ragged() ? std::vector<int64_t>{p.TotalQ(), H, dv} : std::vector<int64_t>{B, H, Tq, dv};
  // Key side, without d: [B, G, Tk], a pool [pages, page, G] or [total_k, G].
  std::vector<int64_t> key_rows = {B, G, Tk};
  if (p.is_paged()) {
    key_rows = {p.num_pages, p.page_size, G};
  } else if (p.is_ragged()) {
    key_rows = {p.TotalK(), G};
  }
  std::vector<int64_t> k_shape = key_rows, v_shape = key_rows;
  k_shape.push_back(d);
  v_shape.push_back(dv);
  ATTNKIT_RETURN_IF_ERROR(CheckTensor("q", a.q, p.dtype, q_shape));
  ATTNKIT_RETURN_IF_ERROR(CheckTensor("k", a.k, p.kv_dtype, k_shape));
  ATTNKIT_RETURN_IF_ERROR(CheckTensor("v", a.v, p.kv_dtype, v_shape));
  ATTNKIT_RETURN_IF_ERROR(CheckTensor("o", a.o, p.dtype, o_shape));
  if (p.return_lse) {
    const std::vector<int64_t> lse_shape =
        p.is_ragged() ? std::vector<int64_t>{H, p.TotalQ()} : std::vector<int64_t>{B, H, Tq};
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("lse", a.lse, DType::kF32, lse_shape));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("lse", a.lse, "return_lse"));
  }
  if (p.has_kv_lengths()) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("kv_lengths", a.kv_lengths, DType::kI32, {B}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("kv_lengths", a.kv_lengths, "kv_lengths"));
  }
  if (p.blocked_mask) {
    ATTNKIT_RETURN_IF_ERROR(
        CheckTensor("blocked_mask", a.blocked_mask, DType::kU8, {B, H, Tq, Tk}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("blocked_mask", a.blocked_mask, "blocked_mask"));
  }
  if (p.additive_bias) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("bias", a.bias, DType::kF32, {B, H, Tq, Tk}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("bias", a.bias, "additive_bias"));
  }
  if (IsScaledKv(p.kv_dtype)) {  // per row; a stride-0 view is one scale per tensor
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("k_scale", a.k_scale, DType::kF32, key_rows));
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("v_scale", a.v_scale, DType::kF32, key_rows));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("k_scale", a.k_scale, "int8 or fp8 K/V"));
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("v_scale", a.v_scale, "int8 or fp8 K/V"));
  }
  if (p.is_paged()) {
    ATTNKIT_RETURN_IF_ERROR(
        CheckTensor("block_table", a.block_table, DType::kI32, {B, p.max_pages()}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("block_table", a.block_table, "paged K/V (page_size)"));
  }
  if (p.is_ragged()) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("cu_seqlens_q", a.cu_seqlens_q, DType::kI32, {B + 1}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("cu_seqlens_q", a.cu_seqlens_q, "q_lengths (ragged)"));
  }
  if (p.is_ragged() && !p.is_paged()) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("cu_seqlens_k", a.cu_seqlens_k, DType::kI32, {B + 1}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(
        CheckAbsent("cu_seqlens_k", a.cu_seqlens_k, "q_lengths with packed (not paged) K/V"));
  }
  if (p.sinks) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("sinks", a.sinks, DType::kF32, {H}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("sinks", a.sinks, "sinks"));
  }
  if (p.alibi) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("alibi_slopes", a.alibi_slopes, DType::kF32, {H}));
  } else {
    ATTNKIT_RETURN_IF_ERROR(CheckAbsent("alibi_slopes", a.alibi_slopes, "alibi"));
  }
  for (const TensorView* out : {&a.o, &a.lse}) {
    for (const TensorView* in :
         {&a.q, &a.k, &a.v, &a.kv_lengths, &a.blocked_mask, &a.bias, &a.k_scale, &a.v_scale,
          &a.block_table, &a.cu_seqlens_q, &a.cu_seqlens_k, &a.sinks, &a.alibi_slopes}) {
      if (Overlaps(*out, *in)) {
        return absl::InvalidArgumentError("an output tensor (o or lse) overlaps an input");
      }
    }
  }
  if (Overlaps(a.o, a.lse)) return absl::InvalidArgumentError("o and lse overlap");
  return absl::OkStatus();
}

absl::Status ValidateHostIndexTensors(const AttentionProblem& p, const AttentionArgs& a) {
  auto i32 = [](const TensorView& t, int64_t i, int64_t j = 0) {
    return int64_t{static_cast<const int32_t*>(t.data)[t.Offset(i, j)]};
  };
  if (p.has_kv_lengths()) {
    for (int64_t b = 0; b < p.batch; ++b) {
      if (i32(a.kv_lengths, b) != p.kv_lengths[b]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kv_lengths tensor[%d] (%d) differs from the problem's kv_lengths[%d] (%d)", b,
            i32(a.kv_lengths, b), b, p.kv_lengths[b]));
      }
    }
  }
  // cu_seqlens: 0, then the running sums of the problem's lengths.
  auto check_offsets = [&](const TensorView& t, absl::string_view name, bool queries) {
    int64_t want = 0;
    for (int64_t b = 0; b <= p.batch; ++b) {
      if (i32(t, b) != want) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s[%d] (%d) must be %d: 0, then the running sum of %s", name, b,
                            i32(t, b), want, queries ? "q_lengths" : "kv_lengths"));
      }
      if (b < p.batch) want += queries ? p.QLength(b) : p.KvLength(b);
    }
    return absl::OkStatus();
  };
  if (p.is_ragged()) ATTNKIT_RETURN_IF_ERROR(check_offsets(a.cu_seqlens_q, "cu_seqlens_q", true));
  if (!a.cu_seqlens_k.empty()) {
    ATTNKIT_RETURN_IF_ERROR(check_offsets(a.cu_seqlens_k, "cu_seqlens_k", false));
  }
  if (p.is_paged()) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t used = (p.KvLength(b) + p.page_size - 1) / p.page_size;
      for (int64_t j = 0; j < used; ++j) {
        const int64_t page = i32(a.block_table, b, j);
        if (page < 0 || page >= p.num_pages) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "block_table[%d, %d] (%d) must be a page of the pool, in [0, num_pages (%d))", b, j,
              page, p.num_pages));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGradArgs(const AttentionProblem& p, const AttentionArgs& a,
                              const GradArgs& g) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, a));
  if (!p.return_lse) {
    return absl::InvalidArgumentError(
        "return_lse must be true for the backward pass: it reads the forward's lse");
  }
  ATTNKIT_RETURN_IF_ERROR(ValidateFastBackward(p));
  // The forward's checks made these shapes; the gradients take them over.
  auto like = [](absl::string_view name, const TensorView& t, const TensorView& model) {
    return CheckTensor(name, t, model.dtype,
                       std::vector<int64_t>(model.shape.begin(), model.shape.begin() + model.rank));
  };
  ATTNKIT_RETURN_IF_ERROR(like("d_o", g.d_o, a.o));
  ATTNKIT_RETURN_IF_ERROR(like("dq", g.dq, a.q));
  ATTNKIT_RETURN_IF_ERROR(like("dk", g.dk, a.k));
  ATTNKIT_RETURN_IF_ERROR(like("dv", g.dv, a.v));
  if (!g.dbias.empty()) {
    if (!p.additive_bias) {
      return absl::InvalidArgumentError("dbias was given but the problem has additive_bias off");
    }
    ATTNKIT_RETURN_IF_ERROR(
        CheckTensor("dbias", g.dbias, DType::kF32, {p.batch, p.num_heads, p.q_len, p.kv_len}));
    for (int i = 0; i < g.dbias.rank; ++i) {
      if (g.dbias.strides[i] == 0 && g.dbias.shape[i] > 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dbias has stride 0 in dim %d (%s): gradients are written whole, never broadcast", i,
            g.dbias.DebugString()));
      }
    }
  }
  if (!g.dsinks.empty()) {
    if (!p.sinks) {
      return absl::InvalidArgumentError("dsinks was given but the problem has sinks off");
    }
    ATTNKIT_RETURN_IF_ERROR(CheckTensor("dsinks", g.dsinks, DType::kF32, {p.num_heads}));
    if (p.num_heads > 1 && g.dsinks.strides[0] == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dsinks has stride 0 (%s): gradients are written whole, never broadcast",
                          g.dsinks.DebugString()));
    }
  }
  const std::vector<const TensorView*> outputs = {&g.dq, &g.dk, &g.dv, &g.dbias, &g.dsinks};
  for (const TensorView* out : outputs) {
    for (const TensorView* in : {&a.q, &a.k, &a.v, &a.o, &a.lse, &a.kv_lengths, &a.blocked_mask,
                                 &a.bias, &a.k_scale, &a.v_scale, &a.block_table, &a.cu_seqlens_q,
                                 &a.cu_seqlens_k, &a.sinks, &a.alibi_slopes, &g.d_o}) {
      if (Overlaps(*out, *in)) {
        return absl::InvalidArgumentError(
            "a gradient output (dq, dk, dv, dbias or dsinks) overlaps an input");
      }
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (Overlaps(*outputs[i], *outputs[j])) {
        return absl::InvalidArgumentError(
            "two gradient outputs (dq, dk, dv, dbias, dsinks) overlap");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::Supports(const AttentionProblem& p) const {
  ATTNKIT_RETURN_IF_ERROR(Available());
  return CheckCapabilities(Caps(), p);
}

absl::Status Backend::SupportsBackward(const AttentionProblem& p) const {
  ATTNKIT_RETURN_IF_ERROR(Available());
  return CheckBackwardCapabilities(Caps(), p);
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> Backend::Allocate(size_t bytes) {
  ATTNKIT_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Allocate(bytes));
  return std::unique_ptr<DeviceBuffer>(new HostBuffer(std::move(buffer)));
}

absl::Status Backend::Upload(const void* host, DeviceBuffer* dst, size_t bytes) {
  if (bytes > dst->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload of %u bytes into a buffer of %u bytes", bytes, dst->size()));
  }
  if (bytes > 0) std::memcpy(dst->data(), host, bytes);
  return absl::OkStatus();
}

absl::Status Backend::CheckUploadRange(const DeviceBuffer& dst, size_t dst_offset, size_t bytes) {
  if (dst_offset > dst.size() || bytes > dst.size() - dst_offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload of %u bytes at offset %u into a buffer of %u bytes", bytes,
                        dst_offset, dst.size()));
  }
  return absl::OkStatus();
}

absl::Status Backend::UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                               size_t bytes) {
  ATTNKIT_RETURN_IF_ERROR(CheckUploadRange(*dst, dst_offset, bytes));
  if (bytes > 0) std::memcpy(static_cast<char*>(dst->data()) + dst_offset, host, bytes);
  return absl::OkStatus();
}

absl::Status Backend::SetStream(void* stream) {
  (void)stream;
  return absl::UnimplementedError(
      absl::StrCat(Name(), " runs on the host; it has no stream to set"));
}

absl::Status Backend::Download(const DeviceBuffer& src, void* host, size_t bytes) {
  if (bytes > src.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("download of %u bytes from a buffer of %u bytes", bytes, src.size()));
  }
  if (bytes > 0) std::memcpy(host, src.data(), bytes);
  return absl::OkStatus();
}

absl::Status Backend::Forward(const AttentionProblem& p, const AttentionArgs& args, RunInfo* info) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  if (UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(ValidateHostIndexTensors(p, args));
  const absl::Status supported = Supports(p);
  if (!supported.ok()) {
    return absl::Status(supported.code(),
                        absl::StrCat(Name(), " cannot run ", p.Id(), ": ", supported.message()));
  }
  return ForwardChecked(p, args, info);
}

absl::Status Backend::ForwardChecked(const AttentionProblem& p, const AttentionArgs& args,
                                     RunInfo* info) {
  RunInfo local;
  RunInfo* out = info != nullptr ? info : &local;
  out->backend = Name();
  return ForwardImpl(p, args, out);
}

absl::Status Backend::Backward(const AttentionProblem& p, const AttentionArgs& args,
                               const GradArgs& grads, RunInfo* info) {
  ATTNKIT_RETURN_IF_ERROR(ValidateGradArgs(p, args, grads));
  if (UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(ValidateHostIndexTensors(p, args));
  const absl::Status supported = SupportsBackward(p);
  if (!supported.ok()) {
    return absl::Status(supported.code(), absl::StrCat(Name(), " cannot run the backward of ",
                                                       p.Id(), ": ", supported.message()));
  }
  if (!grads.dbias.empty() && !Caps().backward.bias_grad) {
    return absl::UnimplementedError(absl::StrCat(Name(), " cannot run the backward of ", p.Id(),
                                                 ": dbias is not supported (leave it out)"));
  }
  return BackwardChecked(p, args, grads, info);
}

absl::Status Backend::BackwardChecked(const AttentionProblem& p, const AttentionArgs& args,
                                      const GradArgs& grads, RunInfo* info) {
  RunInfo local;
  RunInfo* out = info != nullptr ? info : &local;
  out->backend = Name();
  return BackwardImpl(p, args, grads, out);
}

absl::Status Backend::BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                   const GradArgs& grads, RunInfo* info) {
  (void)args;
  (void)grads;
  (void)info;
  return absl::UnimplementedError(absl::StrCat(Name(), " has no backward pass (for ", p.Id(), ")"));
}

}  // namespace attnkit

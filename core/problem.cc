#include "core/problem.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checked_math.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

// Upper bound for any one dimension; keeps every product below 2^63 when
// combined with the byte-size checks.
constexpr int64_t kMaxDim = int64_t{1} << 31;

absl::Status Invalid(const absl::FormatSpec<>& msg) {
  return absl::InvalidArgumentError(absl::StrFormat(msg));
}

absl::Status ValidatePagingAndRagged(const AttentionProblem& p) {
  if (p.page_size != 0) {
    ATTNKIT_RETURN_IF_ERROR(RequireRange("page_size", p.page_size, kMinPageSize, kMaxPageSize));
    if ((p.page_size & (p.page_size - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("page_size (%d) must be a power of two", p.page_size));
    }
    ATTNKIT_RETURN_IF_ERROR(RequireRange("num_pages", p.num_pages, 1, kMaxDim));
  } else if (p.num_pages != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_pages (%d) must be 0 unless page_size is set (paged K/V)", p.num_pages));
  }
  const bool special_kv = p.is_paged() || !p.q_lengths.empty() || IsScaledKv(p.kv_dtype);
  if (special_kv && (p.poison_blocked || p.nonfinite_inputs > 0)) {
    return Invalid(
        "poison_blocked and nonfinite_inputs draw into dense float K/V only; paged (page_size), "
        "ragged (q_lengths), int8 and fp8 problems take neither (their unread pool rows are NaN "
        "already)");
  }
  if (p.q_lengths.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(p.q_lengths.size()) != p.batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("q_lengths has %d entries; a ragged batch needs one per sequence (%d)",
                        p.q_lengths.size(), p.batch));
  }
  for (size_t b = 0; b < p.q_lengths.size(); ++b) {
    if (p.q_lengths[b] < 0 || p.q_lengths[b] > p.q_len) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "q_lengths[%d] (%d) must be in [0, q_len (%d)]", b, p.q_lengths[b], p.q_len));
    }
  }
  if (p.kv_lengths.empty()) {
    return Invalid("a ragged batch (q_lengths) needs kv_lengths: each sequence's key count");
  }
  if (p.TotalQ() == 0) {
    return Invalid("q_lengths are all 0; a ragged batch needs at least one query");
  }
  if (!p.is_paged() && p.TotalK() == 0) {
    return Invalid(
        "kv_lengths are all 0; a ragged batch with packed K/V needs at least one key (or a "
        "page_size)");
  }
  if (p.layout != Layout::kBTHD) {
    return Invalid(
        "a ragged batch (q_lengths) needs layout BTHD: its packed tensors are token-major "
        "[tokens, heads, head_dim]");
  }
  if (p.blocked_mask || p.additive_bias) {
    return Invalid("a ragged batch (q_lengths) takes no blocked_mask or additive_bias");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RequireRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%d) must be in [%d, %d]", field, value, lo, hi));
  }
  return absl::OkStatus();
}

absl::string_view MaskKindName(MaskKind kind) {
  switch (kind) {
    case MaskKind::kCausal:
      return "causal";
    case MaskKind::kSlidingWindow:
      return "window";
    default:
      return "none";
  }
}

absl::string_view AlignmentName(Alignment a) { return a == Alignment::kTopLeft ? "tl" : "br"; }
absl::string_view ComputeModeName(ComputeMode m) {
  return m == ComputeMode::kFast ? "fast" : "exact";
}

MaskParams AttentionProblem::mask_params(int64_t b) const {
  MaskParams m;
  m.q_len = QLength(b);
  m.bottom_right = alignment == Alignment::kBottomRight;
  switch (mask) {
    case MaskKind::kNone:
      break;
    case MaskKind::kCausal:
      m.right = 0;
      break;
    case MaskKind::kSlidingWindow:
      m.left = window_left;
      m.right = window_right;
      break;
  }
  return m;
}

int64_t AttentionProblem::TotalQ() const {
  if (q_lengths.empty()) return batch * q_len;
  int64_t total = 0;
  for (int64_t n : q_lengths) total += n;
  return total;
}

int64_t AttentionProblem::TotalK() const {
  if (kv_lengths.empty()) return batch * kv_len;
  int64_t total = 0;
  for (int64_t n : kv_lengths) total += n;
  return total;
}

absl::string_view AttentionProblem::Variant() const {
  if (num_kv_heads == num_heads) return "mha";
  if (num_kv_heads == 1) return "mqa";
  return "gqa";
}

std::string AttentionProblem::Id() const {
  std::string id = absl::StrFormat("%s_h%d_g%d_q%d_k%d_d%d", Variant(), num_heads, num_kv_heads,
                                   q_len, kv_len, head_dim);
  if (has_value_dim()) absl::StrAppend(&id, "_dv", value_dim());
  if (batch != 1) absl::StrAppend(&id, "_b", batch);
  absl::StrAppend(&id, "_", MaskKindName(mask));
  if (mask == MaskKind::kSlidingWindow) {
    absl::StrAppend(&id, window_left, "x", window_right);
  }
  // The alignment places the diagonal, which masks and ALiBi measure from.
  if (mask != MaskKind::kNone || alibi) absl::StrAppend(&id, "_", AlignmentName(alignment));
  if (is_ragged()) {
    absl::StrAppend(&id, "_ragged");
  } else if (has_kv_lengths()) {
    absl::StrAppend(&id, "_pad");
  }
  if (is_paged()) absl::StrAppend(&id, "_paged", page_size);
  if (blocked_mask) absl::StrAppend(&id, "_dense");
  if (additive_bias) absl::StrAppend(&id, "_bias");
  if (softcap > 0) absl::StrAppend(&id, "_cap");
  if (sinks) absl::StrAppend(&id, "_sinks");
  if (alibi) absl::StrAppend(&id, "_alibi");
  if (layout == Layout::kBTHD) absl::StrAppend(&id, "_bthd");
  if (return_lse) absl::StrAppend(&id, "_lse");
  absl::StrAppend(&id, "_", DTypeName(dtype));
  if (kv_dtype != dtype) absl::StrAppend(&id, "_kv", DTypeName(kv_dtype));
  if (backward) absl::StrAppend(&id, "_bwd");
  if (fast()) absl::StrAppend(&id, "_fast");
  return id;
}

AttentionProblem BasicProblem(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                              int64_t kv_len, int64_t head_dim) {
  AttentionProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.head_dim = head_dim;
  p.model_dim = heads * head_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(head_dim)));
  return p;
}

absl::Status ValidateFastBackward(const AttentionProblem& p) {
  if (p.fast() && p.dtype != p.kv_dtype) {
    // FAST would round Q to K's type, a step with no gradient rule.
    return absl::InvalidArgumentError(absl::StrFormat(
        "compute (FAST) with backward (true) needs dtype (%s) equal to kv_dtype (%s): FAST "
        "rounds Q to K's type, which has no gradient; use EXACT",
        DTypeName(p.dtype), DTypeName(p.kv_dtype)));
  }
  return absl::OkStatus();
}

absl::Status ValidateProblem(const AttentionProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(RequireRange("batch", p.batch, 1, kMaxDim));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("num_heads", p.num_heads, 1, kProblemMaxHeads));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("num_kv_heads", p.num_kv_heads, 1, p.num_heads));
  if (p.num_heads % p.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_heads (%d) must be a multiple of num_kv_heads (%d)", p.num_heads, p.num_kv_heads));
  }
  ATTNKIT_RETURN_IF_ERROR(RequireRange("head_dim", p.head_dim, 1, kProblemMaxHeadDim));
  if (p.value_head_dim != 0) {  // 0 = head_dim
    ATTNKIT_RETURN_IF_ERROR(
        RequireRange("value_head_dim", p.value_head_dim, 1, kProblemMaxHeadDim));
  }
  ATTNKIT_RETURN_IF_ERROR(RequireRange("model_dim", p.model_dim, 1, kMaxDim));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("q_len", p.q_len, 1, kMaxDim));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("kv_len", p.kv_len, 1, kMaxDim));
  if (!IsFloatStorage(p.dtype) || !IsKvStorage(p.kv_dtype)) {
    return Invalid(
        "dtype must be F32, F16 or BF16, and kv_dtype F32, F16, BF16, INT8, FP8_E4M3 or FP8_E5M2");
  }
  if (p.mask == MaskKind::kSlidingWindow) {
    ATTNKIT_RETURN_IF_ERROR(RequireRange("mask.window_left", p.window_left, 0, kMaxDim));
    ATTNKIT_RETURN_IF_ERROR(RequireRange("mask.window_right", p.window_right, 0, kMaxDim));
  } else if (p.window_left != 0 || p.window_right != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mask.window_left (%d) and mask.window_right (%d) must be 0 unless "
                        "mask.kind is SLIDING_WINDOW (it is %s)",
                        p.window_left, p.window_right, MaskKindName(p.mask)));
  }
  if (!std::isfinite(p.scale) || p.scale <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("scale (%g) must be finite and > 0", p.scale));
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("softcap (%g) must be finite and >= 0 (0 turns it off)", p.softcap));
  }
  if (!p.kv_lengths.empty()) {
    if (static_cast<int64_t>(p.kv_lengths.size()) != p.batch) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kv_lengths has %d entries; it must be empty or have one per batch entry (%d)",
          p.kv_lengths.size(), p.batch));
    }
    for (size_t b = 0; b < p.kv_lengths.size(); ++b) {
      if (p.kv_lengths[b] < 0 || p.kv_lengths[b] > p.kv_len) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kv_lengths[%d] (%d) must be in [0, kv_len (%d)]", b, p.kv_lengths[b], p.kv_len));
      }
    }
  }
  ATTNKIT_RETURN_IF_ERROR(ValidatePagingAndRagged(p));
  if (p.backward) {  // a training step: gradients of dense float K/V
    if (p.is_paged()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "backward (true) needs dense K/V; page_size (%d) must be 0", p.page_size));
    }
    if (IsScaledKv(p.kv_dtype)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "backward (true) needs float K/V; kv_dtype %s has no gradient", DTypeName(p.kv_dtype)));
    }
    if (!p.return_lse) {
      return absl::InvalidArgumentError(
          "backward (true) needs return_lse: the backward pass reads the forward's lse");
    }
    ATTNKIT_RETURN_IF_ERROR(ValidateFastBackward(p));
  }
  if (p.nonfinite_inputs < 0 || p.nonfinite_inputs > kMaxNonfiniteInputs) {
    return absl::InvalidArgumentError(absl::StrFormat("nonfinite_inputs (%d) must be in [0, %d]",
                                                      p.nonfinite_inputs, kMaxNonfiniteInputs));
  }
  if (p.memory_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory_budget_bytes (%d) must be >= 1 (unset means %d)",
                        p.memory_budget_bytes, kDefaultMemoryBudgetBytes));
  }
  // Every tensor's element count must fit in 64 bits.
  ATTNKIT_ASSIGN_OR_RETURN(int64_t bh, CheckedMul(p.batch, p.num_heads, "batch * num_heads"));
  ATTNKIT_ASSIGN_OR_RETURN(int64_t q_elems, CheckedMul(bh, p.q_len, "Q elements"));
  ATTNKIT_RETURN_IF_ERROR(
      CheckedMul(q_elems, std::max(p.head_dim, p.value_dim()) * 4, "Q bytes").status());
  ATTNKIT_ASSIGN_OR_RETURN(int64_t k_elems,
                           CheckedMul(p.batch * p.num_kv_heads, p.kv_len, "K elements"));
  ATTNKIT_RETURN_IF_ERROR(
      CheckedMul(k_elems, std::max(p.head_dim, p.value_dim()) * 4, "K bytes").status());
  if (p.blocked_mask || p.additive_bias) {
    ATTNKIT_RETURN_IF_ERROR(CheckedMul(q_elems, p.kv_len * 4, "mask/bias bytes").status());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ProblemBytes(const AttentionProblem& p) {
  const int64_t q_size = DTypeSize(p.dtype), kv_size = DTypeSize(p.kv_dtype);
  int64_t total = 0;
  auto add = [&total](int64_t a, int64_t b, const char* what) -> absl::Status {
    ATTNKIT_ASSIGN_OR_RETURN(const int64_t n, CheckedMul(a, b, what));
    ATTNKIT_ASSIGN_OR_RETURN(total, CheckedAdd(total, n, "tensor bytes"));
    return absl::OkStatus();
  };
  // Query rows: [B, H, Tq] (or [H, total_q] packed); Q adds E, O Ev.
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t q_tokens,
                           p.is_ragged() ? absl::StatusOr<int64_t>(p.TotalQ())
                                         : CheckedMul(p.batch, p.q_len, "query tokens"));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t rows, CheckedMul(q_tokens, p.num_heads, "query rows"));
  ATTNKIT_RETURN_IF_ERROR(add(rows, (p.head_dim + p.value_dim()) * q_size, "Q + O bytes"));
  // Key rows: [B, G, Tk], a packed [total_k, G] or a pool [pages, page, G].
  int64_t kv_tokens = 0;
  if (p.is_paged()) {
    ATTNKIT_ASSIGN_OR_RETURN(kv_tokens, CheckedMul(p.num_pages, p.page_size, "pool tokens"));
  } else if (p.is_ragged()) {
    kv_tokens = p.TotalK();
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(kv_tokens, CheckedMul(p.batch, p.kv_len, "key tokens"));
  }
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t kv_rows,
                           CheckedMul(kv_tokens, p.num_kv_heads, "key rows"));
  ATTNKIT_RETURN_IF_ERROR(add(kv_rows, (p.head_dim + p.value_dim()) * kv_size, "K + V bytes"));
  if (IsScaledKv(p.kv_dtype)) ATTNKIT_RETURN_IF_ERROR(add(kv_rows, 2 * 4, "K/V scale bytes"));
  if (p.return_lse) ATTNKIT_RETURN_IF_ERROR(add(rows, 4, "LSE bytes"));
  if (p.has_kv_lengths()) ATTNKIT_RETURN_IF_ERROR(add(p.batch, 4, "kv_lengths bytes"));
  if (p.sinks) ATTNKIT_RETURN_IF_ERROR(add(p.num_heads, 4, "sinks bytes"));
  if (p.alibi) ATTNKIT_RETURN_IF_ERROR(add(p.num_heads, 4, "alibi_slopes bytes"));
  if (p.is_paged()) ATTNKIT_RETURN_IF_ERROR(add(p.batch, p.max_pages() * 4, "block table bytes"));
  if (p.is_ragged()) {  // cu_seqlens_q, and cu_seqlens_k unless K/V are paged
    ATTNKIT_RETURN_IF_ERROR(add(p.batch + 1, (p.is_paged() ? 1 : 2) * 4, "cu_seqlens bytes"));
  }
  // [B, H, Tq, Tk]: the dense mask (1 byte) and bias (4 bytes).
  const int64_t pair_size = (p.blocked_mask ? 1 : 0) + (p.additive_bias ? 4 : 0);
  if (pair_size > 0) {
    ATTNKIT_ASSIGN_OR_RETURN(const int64_t pairs, CheckedMul(rows, p.kv_len, "mask/bias entries"));
    ATTNKIT_RETURN_IF_ERROR(add(pairs, pair_size, "mask/bias bytes"));
  }
  return total;
}

int64_t KvBytesRead(const AttentionProblem& p) {
  // One key's K row (E) and V row (Ev), with their int8 scales.
  const int64_t row_bytes =
      (p.head_dim + p.value_dim()) * static_cast<int64_t>(DTypeSize(p.kv_dtype)) +
      (IsScaledKv(p.kv_dtype) ? 8 : 0);
  int64_t keys = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t nq = p.QLength(b);
    if (nq == 0) continue;
    const MaskParams m = p.mask_params(b);
    const int64_t kv_length = p.KvLength(b);
    // Ranges are monotone in the query position: their union runs from the
    // first row's begin to the last row's end (empty rows aside).
    int64_t lo = kv_length, hi = 0;
    for (int64_t i = 0; i < nq; ++i) {
      const KeyRange r = VisibleKeys(m, i, kv_length);
      if (r.size() == 0) continue;
      lo = std::min(lo, r.begin);
      hi = std::max(hi, r.end);
    }
    if (hi > lo) keys += hi - lo;
  }
  return keys * p.num_kv_heads * row_bytes;
}

absl::Status CheckMemoryBudget(const AttentionProblem& p) {
  const absl::StatusOr<int64_t> bytes = ProblemBytes(p);
  if (!bytes.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the tensors of %s do not fit in memory_budget_bytes (%d): %s", p.Id(),
                        p.memory_budget_bytes, bytes.status().message()));
  }
  if (*bytes > p.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the tensors of %s need %d bytes, more than memory_budget_bytes (%d); raise "
        "memory_budget_bytes in the config or shrink the problem",
        p.Id(), *bytes, p.memory_budget_bytes));
  }
  return absl::OkStatus();
}

int64_t CountVisiblePairs(const AttentionProblem& p) {
  int64_t pairs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const MaskParams m = p.mask_params(b);
    const int64_t kv_length = p.KvLength(b);
    for (int64_t i = 0; i < p.QLength(b); ++i) pairs += VisibleKeys(m, i, kv_length).size();
  }
  return pairs * p.num_heads;
}

double UsefulFlops(const AttentionProblem& p) {
  return 2.0 * static_cast<double>(p.head_dim + p.value_dim()) *
         static_cast<double>(CountVisiblePairs(p));
}

double UsefulBackwardFlops(const AttentionProblem& p) {
  return 2.0 * static_cast<double>(3 * p.head_dim + 2 * p.value_dim()) *
         static_cast<double>(CountVisiblePairs(p));
}

}  // namespace attnkit

#include "core/problem_config.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

DType FromProto(DTypeProto t, DType unset) {
  switch (t) {
    case F16:
      return DType::kF16;
    case BF16:
      return DType::kBF16;
    case INT8:
      return DType::kI8;
    case F32:
      return DType::kF32;
    default:
      return unset;
  }
}

DTypeProto ToProto(DType t) {
  switch (t) {
    case DType::kF16:
      return F16;
    case DType::kBF16:
      return BF16;
    case DType::kI8:
      return INT8;
    default:
      return F32;
  }
}

}  // namespace

absl::StatusOr<AttentionProblem> ProblemFromConfig(const AttentionConfig& c) {
  AttentionProblem p;
  p.name = c.name();
  p.batch = c.batch() == 0 ? 1 : c.batch();
  p.num_heads = c.num_heads();
  p.num_kv_heads = c.num_kv_heads() == 0 ? c.num_heads() : c.num_kv_heads();
  p.head_dim = c.head_dim();
  // Ranges first: the default model_dim multiplies them (found by
  // //tests/fuzz:config_fuzz_test: head_dim near 2^63 overflowed here).
  ATTNKIT_RETURN_IF_ERROR(RequireRange("num_heads", c.num_heads(), 1, kProblemMaxHeads));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("head_dim", c.head_dim(), 1, kProblemMaxHeadDim));
  p.model_dim = c.model_dim() == 0 ? c.num_heads() * c.head_dim() : c.model_dim();
  p.q_len = c.q_len();
  p.kv_len = c.kv_len() == 0 ? c.q_len() : c.kv_len();
  p.dtype = FromProto(c.dtype(), DType::kF32);
  p.kv_dtype = FromProto(c.kv_dtype(), p.dtype);
  p.layout = c.layout() == BTHD ? Layout::kBTHD : Layout::kBHTD;
  switch (c.mask().kind()) {
    case MaskSpec::CAUSAL:
      p.mask = MaskKind::kCausal;
      break;
    case MaskSpec::SLIDING_WINDOW:
      p.mask = MaskKind::kSlidingWindow;
      break;
    default:
      p.mask = MaskKind::kNone;
  }
  p.window_left = c.mask().window_left();
  p.window_right = c.mask().window_right();
  if (c.alignment() == ALIGNMENT_UNSPECIFIED) {
    if (p.mask != MaskKind::kNone && p.q_len != p.kv_len) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "alignment must be TOP_LEFT or BOTTOM_RIGHT when q_len (%d) != kv_len (%d) "
          "with a %s mask",
          p.q_len, p.kv_len, MaskKindName(p.mask)));
    }
    p.alignment = Alignment::kBottomRight;
  } else {
    p.alignment = c.alignment() == TOP_LEFT ? Alignment::kTopLeft : Alignment::kBottomRight;
  }
  p.scale = c.has_scale() ? c.scale() : static_cast<float>(1.0 / std::sqrt(double(p.head_dim)));
  p.softcap = c.softcap();
  p.kv_lengths.assign(c.kv_lengths().begin(), c.kv_lengths().end());
  p.blocked_mask = c.blocked_mask();
  p.additive_bias = c.additive_bias();
  p.backward = c.backward();
  p.return_lse = c.return_lse() || p.backward;  // the backward pass reads the lse
  p.backend = c.backend().empty() ? "auto" : c.backend();
  p.seed = c.seed();
  p.poison_blocked = c.poison_blocked();
  p.nonfinite_inputs = c.nonfinite_inputs();
  if (c.memory_budget_bytes() != 0) p.memory_budget_bytes = c.memory_budget_bytes();
  p.page_size = c.page_size();
  p.q_lengths.assign(c.q_lengths().begin(), c.q_lengths().end());
  if (p.page_size > 0) {
    // Ranges first: the default multiplies them.
    ATTNKIT_RETURN_IF_ERROR(RequireRange("page_size", p.page_size, kMinPageSize, kMaxPageSize));
    ATTNKIT_RETURN_IF_ERROR(RequireRange("batch", p.batch, 1, int64_t{1} << 31));
    ATTNKIT_RETURN_IF_ERROR(RequireRange("kv_len", p.kv_len, 1, int64_t{1} << 31));
    p.num_pages = c.num_pages() != 0 ? c.num_pages() : p.batch * p.max_pages();
  } else {
    p.num_pages = c.num_pages();
  }
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  return p;
}

AttentionConfig ConfigFromProblem(const AttentionProblem& p) {
  AttentionConfig c;
  c.set_name(p.name);
  c.set_batch(p.batch);
  c.set_num_heads(p.num_heads);
  c.set_num_kv_heads(p.num_kv_heads);
  c.set_head_dim(p.head_dim);
  c.set_model_dim(p.model_dim);
  c.set_q_len(p.q_len);
  c.set_kv_len(p.kv_len);
  c.set_dtype(ToProto(p.dtype));
  c.set_kv_dtype(ToProto(p.kv_dtype));
  c.set_layout(p.layout == Layout::kBTHD ? BTHD : BHTD);
  c.mutable_mask()->set_kind(p.mask == MaskKind::kCausal          ? MaskSpec::CAUSAL
                             : p.mask == MaskKind::kSlidingWindow ? MaskSpec::SLIDING_WINDOW
                                                                  : MaskSpec::NONE);
  if (p.mask == MaskKind::kSlidingWindow) {
    c.mutable_mask()->set_window_left(p.window_left);
    c.mutable_mask()->set_window_right(p.window_right);
  }
  c.set_alignment(p.alignment == Alignment::kTopLeft ? TOP_LEFT : BOTTOM_RIGHT);
  c.set_scale(p.scale);
  c.set_softcap(p.softcap);
  for (int64_t l : p.kv_lengths) c.add_kv_lengths(l);
  c.set_blocked_mask(p.blocked_mask);
  c.set_additive_bias(p.additive_bias);
  c.set_return_lse(p.return_lse);
  c.set_backward(p.backward);
  c.set_backend(p.backend);
  c.set_seed(p.seed);
  c.set_poison_blocked(p.poison_blocked);
  c.set_nonfinite_inputs(static_cast<int32_t>(p.nonfinite_inputs));
  if (p.memory_budget_bytes != kDefaultMemoryBudgetBytes) {
    c.set_memory_budget_bytes(p.memory_budget_bytes);
  }
  c.set_page_size(p.page_size);
  c.set_num_pages(p.num_pages);
  for (int64_t l : p.q_lengths) c.add_q_lengths(l);
  return c;
}

AttentionConfig ConfigForReport(AttentionConfig config) {
  if (config.memory_budget_bytes() == 0) config.set_memory_budget_bytes(kDefaultMemoryBudgetBytes);
  return config;
}

}  // namespace attnkit

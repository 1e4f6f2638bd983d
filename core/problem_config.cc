#include "core/problem_config.h"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "attnkit/plugin.h"
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
    case FP8_E4M3:
      return DType::kF8E4M3;
    case FP8_E5M2:
      return DType::kF8E5M2;
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
    case DType::kF8E4M3:
      return FP8_E4M3;
    case DType::kF8E5M2:
      return FP8_E5M2;
    default:
      return F32;
  }
}

// Problem fields whose config form differs (enums, the mask message),
// converted by hand below. Every other row of ATTNKIT_PROBLEM_FIELDS
// (attnkit/plugin.h) is an AttentionConfig field of the same name, copied
// through protobuf reflection; problem_config_test holds the two to that.
constexpr absl::string_view kConvertedByHand[] = {
    "dtype", "kv_dtype", "layout", "mask", "alignment", "window_left", "window_right", "compute"};

bool ConvertedByHand(absl::string_view name) {
  for (absl::string_view n : kConvertedByHand) {
    if (n == name) return true;
  }
  return false;
}

using google::protobuf::FieldDescriptor;

// The config field `name`; Internal when config.proto lacks a field the
// problem's table names (a field added to one side only).
absl::StatusOr<const FieldDescriptor*> ConfigField(absl::string_view name) {
  const FieldDescriptor* f = AttentionConfig::descriptor()->FindFieldByName(std::string(name));
  if (f == nullptr) {
    return absl::InternalError(absl::StrFormat(
        "core/config.proto has no field '%s', which the problem's field table names", name));
  }
  return f;
}

// Config -> problem, one field by reflection, by the config field's type.
template <typename T>
absl::Status FromConfigField(const AttentionConfig& c, absl::string_view name, T* out) {
  if (ConvertedByHand(name)) return absl::OkStatus();
  ATTNKIT_ASSIGN_OR_RETURN(const FieldDescriptor* f, ConfigField(name));
  const google::protobuf::Reflection* r = c.GetReflection();
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    const int n = f->is_repeated() ? r->FieldSize(c, f) : 0;
    out->clear();
    for (int i = 0; i < n; ++i) out->push_back(r->GetRepeatedInt64(c, f, i));
  } else if constexpr (std::is_same_v<T, std::string>) {
    *out = r->GetString(c, f);
  } else if constexpr (std::is_arithmetic_v<T>) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        *out = static_cast<T>(r->GetInt32(c, f));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        *out = static_cast<T>(r->GetInt64(c, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        *out = static_cast<T>(r->GetUInt64(c, f));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        *out = static_cast<T>(r->GetFloat(c, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        *out = static_cast<T>(r->GetBool(c, f));
        break;
      default:
        return absl::InternalError(
            absl::StrFormat("config field '%s' has a type the problem table cannot copy", name));
    }
  }
  return absl::OkStatus();
}

// Problem -> config, one field by reflection (the reverse of the above).
template <typename T>
absl::Status ToConfigField(const T& value, absl::string_view name, AttentionConfig* c) {
  if (ConvertedByHand(name)) return absl::OkStatus();
  ATTNKIT_ASSIGN_OR_RETURN(const FieldDescriptor* f, ConfigField(name));
  const google::protobuf::Reflection* r = c->GetReflection();
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    r->ClearField(c, f);
    for (int64_t v : value) r->AddInt64(c, f, v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    r->SetString(c, f, value);
  } else if constexpr (std::is_arithmetic_v<T>) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        r->SetInt32(c, f, static_cast<int32_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(c, f, static_cast<int64_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(c, f, static_cast<uint64_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        r->SetFloat(c, f, static_cast<float>(value));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(c, f, value != T{});
        break;
      default:
        return absl::InternalError(
            absl::StrFormat("config field '%s' has a type the problem table cannot copy", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttentionProblem> ProblemFromConfig(const AttentionConfig& c) {
  AttentionProblem p;
  // Every field of the same name, by reflection; enums (skipped there) and
  // the defaults an unset (0) field stands for, below.
#define ATTNKIT_FROM_CONFIG(kind, name) ATTNKIT_RETURN_IF_ERROR(FromConfigField(c, #name, &p.name));
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_FROM_CONFIG)
#undef ATTNKIT_FROM_CONFIG
  if (p.batch == 0) p.batch = 1;
  if (p.num_kv_heads == 0) p.num_kv_heads = p.num_heads;
  // Ranges first: the default model_dim multiplies them (found by
  // //tests/fuzz:config_fuzz_test: head_dim near 2^63 overflowed here).
  ATTNKIT_RETURN_IF_ERROR(RequireRange("num_heads", c.num_heads(), 1, kProblemMaxHeads));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("head_dim", c.head_dim(), 1, kProblemMaxHeadDim));
  if (p.model_dim == 0) p.model_dim = c.num_heads() * c.head_dim();
  if (p.value_head_dim == p.head_dim) p.value_head_dim = 0;  // one form per problem
  if (p.kv_len == 0) p.kv_len = p.q_len;
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
    if (c.alibi() && p.q_len != p.kv_len) {  // the diagonal ALiBi measures from
      return absl::InvalidArgumentError(absl::StrFormat(
          "alignment must be TOP_LEFT or BOTTOM_RIGHT when q_len (%d) != kv_len (%d) with "
          "alibi: true (it places the diagonal the distances are measured from)",
          p.q_len, p.kv_len));
    }
    p.alignment = Alignment::kBottomRight;
  } else {
    p.alignment = c.alignment() == TOP_LEFT ? Alignment::kTopLeft : Alignment::kBottomRight;
  }
  p.compute = c.compute() == FAST ? ComputeMode::kFast : ComputeMode::kExact;
  if (!c.has_scale()) p.scale = static_cast<float>(1.0 / std::sqrt(double(p.head_dim)));
  p.return_lse = p.return_lse || p.backward;  // the backward pass reads the lse
  if (p.backend.empty()) p.backend = "auto";
  if (p.memory_budget_bytes == 0) p.memory_budget_bytes = kDefaultMemoryBudgetBytes;
  if (p.page_size > 0) {
    // Ranges first: the default multiplies them.
    ATTNKIT_RETURN_IF_ERROR(RequireRange("page_size", p.page_size, kMinPageSize, kMaxPageSize));
    ATTNKIT_RETURN_IF_ERROR(RequireRange("batch", p.batch, 1, int64_t{1} << 31));
    ATTNKIT_RETURN_IF_ERROR(RequireRange("kv_len", p.kv_len, 1, int64_t{1} << 31));
    if (p.num_pages == 0) p.num_pages = p.batch * p.max_pages();
  }
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  return p;
}

AttentionConfig ConfigFromProblem(const AttentionProblem& p) {
  AttentionConfig c;
#define ATTNKIT_TO_CONFIG(kind, name) ToConfigField(p.name, #name, &c).IgnoreError();
  // A failure here is a field the table and config.proto disagree on,
  // which problem_config_test catches; the field is then left unset.
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_TO_CONFIG)
#undef ATTNKIT_TO_CONFIG
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
  if (p.memory_budget_bytes == kDefaultMemoryBudgetBytes) c.clear_memory_budget_bytes();
  if (p.fast()) c.set_compute(FAST);  // EXACT stays unset, its default
  return c;
}

AttentionConfig ConfigForReport(AttentionConfig config) {
  if (config.memory_budget_bytes() == 0) config.set_memory_budget_bytes(kDefaultMemoryBudgetBytes);
  return config;
}

}  // namespace attnkit

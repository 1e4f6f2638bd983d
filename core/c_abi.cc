#include "core/c_abi.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

// Each C++ enum's numbering is the ABI's (core/attnkit_plugin.h).
static_assert(static_cast<int>(DType::kF32) == ATTNKIT_F32 &&
                  static_cast<int>(DType::kF16) == ATTNKIT_F16 &&
                  static_cast<int>(DType::kBF16) == ATTNKIT_BF16 &&
                  static_cast<int>(DType::kI32) == ATTNKIT_I32 &&
                  static_cast<int>(DType::kU8) == ATTNKIT_U8,
              "DType numbering");
static_assert(static_cast<int>(MaskKind::kNone) == ATTNKIT_MASK_NONE &&
                  static_cast<int>(MaskKind::kCausal) == ATTNKIT_MASK_CAUSAL &&
                  static_cast<int>(MaskKind::kSlidingWindow) == ATTNKIT_MASK_SLIDING_WINDOW,
              "MaskKind numbering");
static_assert(static_cast<int>(Alignment::kTopLeft) == ATTNKIT_ALIGN_TOP_LEFT &&
                  static_cast<int>(Alignment::kBottomRight) == ATTNKIT_ALIGN_BOTTOM_RIGHT,
              "Alignment numbering");
static_assert(static_cast<int>(Layout::kBHTD) == ATTNKIT_LAYOUT_BHTD &&
                  static_cast<int>(Layout::kBTHD) == ATTNKIT_LAYOUT_BTHD,
              "Layout numbering");
static_assert(static_cast<int>(absl::StatusCode::kDataLoss) == ATTNKIT_DATA_LOSS &&
                  static_cast<int>(absl::StatusCode::kInvalidArgument) == ATTNKIT_INVALID_ARGUMENT,
              "status code numbering");

constexpr int kNumDTypes = 6, kNumMasks = 3, kNumAlignments = 2, kNumLayouts = 2;

// The enum `value` of `field`, or InvalidArgument when outside [0, count).
template <typename E>
absl::StatusOr<E> EnumFromC(int32_t value, int count, const char* field) {
  if (value < 0 || value >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%d) is not a known value (0..%d)", field, value, count - 1));
  }
  return static_cast<E>(value);
}

template <typename E>
uint32_t BitsOf(const std::vector<E>& values) {
  uint32_t bits = 0;
  for (E v : values) bits |= 1u << static_cast<int>(v);
  return bits;
}

template <typename E>
std::vector<E> ValuesOf(uint32_t bits, int count) {
  std::vector<E> out;
  for (int v = 0; v < count; ++v) {
    if (bits & (1u << v)) out.push_back(static_cast<E>(v));
  }
  return out;
}

}  // namespace

attnkit_problem ProblemToC(const AttentionProblem& p) {
  attnkit_problem c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.dtype = static_cast<int32_t>(p.dtype);
  c.kv_dtype = static_cast<int32_t>(p.kv_dtype);
  c.layout = static_cast<int32_t>(p.layout);
  c.mask = static_cast<int32_t>(p.mask);
  c.alignment = static_cast<int32_t>(p.alignment);
  c.batch = p.batch;
  c.num_heads = p.num_heads;
  c.num_kv_heads = p.num_kv_heads;
  c.head_dim = p.head_dim;
  c.model_dim = p.model_dim;
  c.q_len = p.q_len;
  c.kv_len = p.kv_len;
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.scale = p.scale;
  c.softcap = p.softcap;
  c.kv_lengths = p.kv_lengths.empty() ? nullptr : p.kv_lengths.data();
  c.num_kv_lengths = static_cast<int64_t>(p.kv_lengths.size());
  c.blocked_mask = p.blocked_mask;
  c.additive_bias = p.additive_bias;
  c.return_lse = p.return_lse;
  c.poison_blocked = p.poison_blocked;
  c.nonfinite_inputs = p.nonfinite_inputs;
  c.memory_budget_bytes = p.memory_budget_bytes;
  c.seed = p.seed;
  c.name = p.name.c_str();
  c.backend = p.backend.c_str();
  c.page_size = p.page_size;
  c.num_pages = p.num_pages;
  c.q_lengths = p.q_lengths.empty() ? nullptr : p.q_lengths.data();
  c.num_q_lengths = static_cast<int64_t>(p.q_lengths.size());
  c.backward = p.backward;
  return c;
}

absl::StatusOr<AttentionProblem> ProblemFromC(const attnkit_problem& c) {
  AttentionProblem p;
  ATTNKIT_ASSIGN_OR_RETURN(p.dtype, EnumFromC<DType>(c.dtype, kNumDTypes, "dtype"));
  ATTNKIT_ASSIGN_OR_RETURN(p.kv_dtype, EnumFromC<DType>(c.kv_dtype, kNumDTypes, "kv_dtype"));
  ATTNKIT_ASSIGN_OR_RETURN(p.layout, EnumFromC<Layout>(c.layout, kNumLayouts, "layout"));
  ATTNKIT_ASSIGN_OR_RETURN(p.mask, EnumFromC<MaskKind>(c.mask, kNumMasks, "mask"));
  ATTNKIT_ASSIGN_OR_RETURN(p.alignment,
                           EnumFromC<Alignment>(c.alignment, kNumAlignments, "alignment"));
  p.batch = c.batch;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.model_dim = c.model_dim;
  p.q_len = c.q_len;
  p.kv_len = c.kv_len;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.scale = c.scale;
  p.softcap = c.softcap;
  if (c.num_kv_lengths < 0 || (c.num_kv_lengths > 0 && c.kv_lengths == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_kv_lengths (%d) must be 0, or the length of a non-null kv_lengths array",
        c.num_kv_lengths));
  }
  if (c.num_kv_lengths > 0) {
    p.kv_lengths.assign(c.kv_lengths, c.kv_lengths + c.num_kv_lengths);
  }
  p.blocked_mask = c.blocked_mask != 0;
  p.additive_bias = c.additive_bias != 0;
  p.return_lse = c.return_lse != 0;
  p.poison_blocked = c.poison_blocked != 0;
  p.nonfinite_inputs = c.nonfinite_inputs;
  p.memory_budget_bytes = c.memory_budget_bytes;
  p.seed = c.seed;
  if (c.name != nullptr) p.name = c.name;
  if (c.backend != nullptr) p.backend = c.backend;
  p.page_size = c.page_size;
  p.num_pages = c.num_pages;
  if (c.num_q_lengths < 0 || (c.num_q_lengths > 0 && c.q_lengths == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_q_lengths (%d) must be 0, or the length of a non-null q_lengths array",
                        c.num_q_lengths));
  }
  if (c.num_q_lengths > 0) p.q_lengths.assign(c.q_lengths, c.q_lengths + c.num_q_lengths);
  p.backward = c.backward != 0;
  return p;
}

attnkit_tensor TensorToC(const TensorView& t) {
  attnkit_tensor c;
  std::memset(&c, 0, sizeof(c));
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.strides[i];
  }
  return c;
}

absl::StatusOr<TensorView> TensorFromC(const attnkit_tensor& c, const char* field) {
  TensorView t;
  if (c.data == nullptr) return t;  // absent
  ATTNKIT_ASSIGN_OR_RETURN(t.dtype, EnumFromC<DType>(c.dtype, kNumDTypes, field));
  if (c.rank < 0 || c.rank > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: rank %d is outside 0..%d", field, c.rank, kMaxRank));
  }
  t.data = c.data;
  t.rank = c.rank;
  for (int i = 0; i < kMaxRank; ++i) {
    t.shape[i] = c.shape[i];
    t.strides[i] = c.strides[i];
  }
  return t;
}

attnkit_args ArgsToC(const AttentionArgs& a) {
  attnkit_args c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.q = TensorToC(a.q);
  c.k = TensorToC(a.k);
  c.v = TensorToC(a.v);
  c.o = TensorToC(a.o);
  c.lse = TensorToC(a.lse);
  c.kv_lengths = TensorToC(a.kv_lengths);
  c.blocked_mask = TensorToC(a.blocked_mask);
  c.bias = TensorToC(a.bias);
  c.k_scale = TensorToC(a.k_scale);
  c.v_scale = TensorToC(a.v_scale);
  c.block_table = TensorToC(a.block_table);
  c.cu_seqlens_q = TensorToC(a.cu_seqlens_q);
  c.cu_seqlens_k = TensorToC(a.cu_seqlens_k);
  return c;
}

absl::StatusOr<AttentionArgs> ArgsFromC(const attnkit_args& c) {
  AttentionArgs a;
  ATTNKIT_ASSIGN_OR_RETURN(a.q, TensorFromC(c.q, "q"));
  ATTNKIT_ASSIGN_OR_RETURN(a.k, TensorFromC(c.k, "k"));
  ATTNKIT_ASSIGN_OR_RETURN(a.v, TensorFromC(c.v, "v"));
  ATTNKIT_ASSIGN_OR_RETURN(a.o, TensorFromC(c.o, "o"));
  ATTNKIT_ASSIGN_OR_RETURN(a.lse, TensorFromC(c.lse, "lse"));
  ATTNKIT_ASSIGN_OR_RETURN(a.kv_lengths, TensorFromC(c.kv_lengths, "kv_lengths"));
  ATTNKIT_ASSIGN_OR_RETURN(a.blocked_mask, TensorFromC(c.blocked_mask, "blocked_mask"));
  ATTNKIT_ASSIGN_OR_RETURN(a.bias, TensorFromC(c.bias, "bias"));
  ATTNKIT_ASSIGN_OR_RETURN(a.k_scale, TensorFromC(c.k_scale, "k_scale"));
  ATTNKIT_ASSIGN_OR_RETURN(a.v_scale, TensorFromC(c.v_scale, "v_scale"));
  ATTNKIT_ASSIGN_OR_RETURN(a.block_table, TensorFromC(c.block_table, "block_table"));
  ATTNKIT_ASSIGN_OR_RETURN(a.cu_seqlens_q, TensorFromC(c.cu_seqlens_q, "cu_seqlens_q"));
  ATTNKIT_ASSIGN_OR_RETURN(a.cu_seqlens_k, TensorFromC(c.cu_seqlens_k, "cu_seqlens_k"));
  return a;
}

attnkit_grads GradsToC(const GradArgs& g) {
  attnkit_grads c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.d_o = TensorToC(g.d_o);
  c.dq = TensorToC(g.dq);
  c.dk = TensorToC(g.dk);
  c.dv = TensorToC(g.dv);
  c.dbias = TensorToC(g.dbias);
  return c;
}

absl::StatusOr<GradArgs> GradsFromC(const attnkit_grads& c) {
  GradArgs g;
  ATTNKIT_ASSIGN_OR_RETURN(g.d_o, TensorFromC(c.d_o, "d_o"));
  ATTNKIT_ASSIGN_OR_RETURN(g.dq, TensorFromC(c.dq, "dq"));
  ATTNKIT_ASSIGN_OR_RETURN(g.dk, TensorFromC(c.dk, "dk"));
  ATTNKIT_ASSIGN_OR_RETURN(g.dv, TensorFromC(c.dv, "dv"));
  ATTNKIT_ASSIGN_OR_RETURN(g.dbias, TensorFromC(c.dbias, "dbias"));
  return g;
}

attnkit_caps CapsToC(const Capabilities& caps) {
  attnkit_caps c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.dtypes = BitsOf(caps.dtypes);
  c.kv_dtypes = BitsOf(caps.kv_dtypes);
  c.masks = BitsOf(caps.masks);
  c.alignments = BitsOf(caps.alignments);
  c.layouts = BitsOf(caps.layouts);
  c.min_head_dim = caps.min_head_dim;
  c.max_head_dim = caps.max_head_dim;
  c.head_dims = caps.head_dims.empty() ? nullptr : caps.head_dims.data();
  c.num_head_dims = static_cast<int64_t>(caps.head_dims.size());
  c.max_group_size = caps.max_group_size;
  c.lse = caps.lse;
  c.kv_lengths = caps.kv_lengths;
  c.blocked_mask = caps.blocked_mask;
  c.additive_bias = caps.additive_bias;
  c.softcap = caps.softcap;
  c.deterministic = caps.deterministic;
  c.paged_kv = caps.paged_kv;
  c.ragged = caps.ragged;
  const BackwardCapabilities& b = caps.backward;
  c.bwd_supported = b.supported;
  c.bwd_dtypes = BitsOf(b.dtypes);
  c.bwd_kv_dtypes = BitsOf(b.kv_dtypes);
  c.bwd_masks = BitsOf(b.masks);
  c.bwd_kv_lengths = b.kv_lengths;
  c.bwd_blocked_mask = b.blocked_mask;
  c.bwd_additive_bias = b.additive_bias;
  c.bwd_bias_grad = b.bias_grad;
  c.bwd_softcap = b.softcap;
  c.bwd_ragged = b.ragged;
  c.bwd_deterministic = b.deterministic;
  return c;
}

Capabilities CapsFromC(const attnkit_caps& c) {
  Capabilities caps;
  caps.dtypes = ValuesOf<DType>(c.dtypes, kNumDTypes);
  caps.kv_dtypes = ValuesOf<DType>(c.kv_dtypes, kNumDTypes);
  caps.masks = ValuesOf<MaskKind>(c.masks, kNumMasks);
  caps.alignments = ValuesOf<Alignment>(c.alignments, kNumAlignments);
  caps.layouts = ValuesOf<Layout>(c.layouts, kNumLayouts);
  caps.min_head_dim = c.min_head_dim;
  caps.max_head_dim = c.max_head_dim;
  if (c.head_dims != nullptr && c.num_head_dims > 0) {
    caps.head_dims.assign(c.head_dims, c.head_dims + c.num_head_dims);
  }
  caps.max_group_size = c.max_group_size;
  caps.lse = c.lse != 0;
  caps.kv_lengths = c.kv_lengths != 0;
  caps.blocked_mask = c.blocked_mask != 0;
  caps.additive_bias = c.additive_bias != 0;
  caps.softcap = c.softcap != 0;
  caps.deterministic = c.deterministic != 0;
  caps.paged_kv = c.paged_kv != 0;
  caps.ragged = c.ragged != 0;
  BackwardCapabilities& b = caps.backward;
  b.supported = c.bwd_supported != 0;
  b.dtypes = ValuesOf<DType>(c.bwd_dtypes, kNumDTypes);
  b.kv_dtypes = ValuesOf<DType>(c.bwd_kv_dtypes, kNumDTypes);
  b.masks = ValuesOf<MaskKind>(c.bwd_masks, kNumMasks);
  b.kv_lengths = c.bwd_kv_lengths != 0;
  b.blocked_mask = c.bwd_blocked_mask != 0;
  b.additive_bias = c.bwd_additive_bias != 0;
  b.bias_grad = c.bwd_bias_grad != 0;
  b.softcap = c.bwd_softcap != 0;
  b.ragged = c.bwd_ragged != 0;
  b.deterministic = c.bwd_deterministic != 0;
  return caps;
}

absl::Status StatusFromC(int32_t code, const char* message) {
  if (code == ATTNKIT_OK) return absl::OkStatus();
  const absl::StatusCode c = (code > 0 && code <= ATTNKIT_DATA_LOSS)
                                 ? static_cast<absl::StatusCode>(code)
                                 : absl::StatusCode::kUnknown;
  return absl::Status(c, message != nullptr ? message : "");
}

attnkit_sdk::Status StatusToSdk(const absl::Status& s) {
  if (s.ok()) return attnkit_sdk::Status{};
  return attnkit_sdk::Status::Error(static_cast<int32_t>(s.code()), std::string(s.message()));
}

}  // namespace attnkit

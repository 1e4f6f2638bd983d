#include "plugin/c_abi.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

// Each C++ enum's numbering is the ABI's (include/attnkit/plugin.h).
static_assert(static_cast<int>(DType::kF32) == ATTNKIT_F32 &&
                  static_cast<int>(DType::kF16) == ATTNKIT_F16 &&
                  static_cast<int>(DType::kBF16) == ATTNKIT_BF16 &&
                  static_cast<int>(DType::kI32) == ATTNKIT_I32 &&
                  static_cast<int>(DType::kU8) == ATTNKIT_U8 &&
                  static_cast<int>(DType::kI8) == ATTNKIT_I8 &&
                  static_cast<int>(DType::kF8E4M3) == ATTNKIT_F8E4M3 &&
                  static_cast<int>(DType::kF8E5M2) == ATTNKIT_F8E5M2,
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

static_assert(static_cast<int>(ComputeMode::kExact) == ATTNKIT_COMPUTE_EXACT &&
                  static_cast<int>(ComputeMode::kFast) == ATTNKIT_COMPUTE_FAST,
              "ComputeMode numbering");

constexpr int kNumDTypes = 8, kNumMasks = 3, kNumAlignments = 2, kNumLayouts = 2,
              kNumComputeModes = 2;

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

template <typename E>
constexpr int EnumCount();
template <>
constexpr int EnumCount<DType>() {
  return kNumDTypes;
}
template <>
constexpr int EnumCount<MaskKind>() {
  return kNumMasks;
}
template <>
constexpr int EnumCount<Alignment>() {
  return kNumAlignments;
}
template <>
constexpr int EnumCount<Layout>() {
  return kNumLayouts;
}
template <>
constexpr int EnumCount<ComputeMode>() {
  return kNumComputeModes;
}

// One field, C++ -> C, by the C++ type: enums and bools as int32, sets as
// bit masks, strings and lists borrowed. A list also fills its count
// (ATTNKIT_LIST_COUNT passes c.num_<name>).
template <typename E, typename = std::enable_if_t<std::is_enum<E>::value>>
void FieldToC(E v, int32_t* c) {
  *c = static_cast<int32_t>(v);
}
inline void FieldToC(bool v, int32_t* c) { *c = v ? 1 : 0; }
inline void FieldToC(int64_t v, int64_t* c) { *c = v; }
inline void FieldToC(uint64_t v, uint64_t* c) { *c = v; }
inline void FieldToC(float v, float* c) { *c = v; }
inline void FieldToC(const std::string& v, const char** c) { *c = v.c_str(); }
template <typename E>
void FieldToC(const std::vector<E>& v, uint32_t* c) {
  *c = BitsOf(v);
}
inline void FieldToC(const std::vector<int64_t>& v, const int64_t** c, int64_t& count) {
  *c = v.empty() ? nullptr : v.data();
  count = static_cast<int64_t>(v.size());
}

// One problem field, C -> C++: InvalidArgument naming `field` for an enum
// value out of range or a list whose count and pointer disagree.
template <typename E, typename = std::enable_if_t<std::is_enum<E>::value>>
absl::Status FieldFromC(int32_t c, const char* field, E* v) {
  absl::StatusOr<E> e = EnumFromC<E>(c, EnumCount<E>(), field);
  if (!e.ok()) return e.status();
  *v = *e;
  return absl::OkStatus();
}
inline absl::Status FieldFromC(int32_t c, const char*, bool* v) {
  *v = c != 0;
  return absl::OkStatus();
}
template <typename T>
absl::Status FieldFromC(T c, const char*, T* v) {
  *v = c;
  return absl::OkStatus();
}
inline absl::Status FieldFromC(const char* c, const char*, std::string* v) {
  if (c != nullptr) *v = c;
  return absl::OkStatus();
}
inline absl::Status FieldFromC(const int64_t* c, int64_t count, const char* field,
                               std::vector<int64_t>* v) {
  if (count < 0 || (count > 0 && c == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_%s (%d) must be 0, or the length of a non-null %s array", field, count, field));
  }
  v->assign(c, c + count);
  return absl::OkStatus();
}

// One capability, C -> C++ (a plugin's table: unknown bits are dropped,
// a list with a bad count reads as empty).
template <typename E>
void CapsFieldFromC(uint32_t c, std::vector<E>* v) {
  *v = ValuesOf<E>(c, EnumCount<E>());
}
inline void CapsFieldFromC(int32_t c, bool* v) { *v = c != 0; }
inline void CapsFieldFromC(int64_t c, int64_t* v) { *v = c; }
inline void CapsFieldFromC(const int64_t* c, int64_t count, std::vector<int64_t>* v) {
  v->clear();
  if (c != nullptr && count > 0) v->assign(c, c + count);
}

}  // namespace

// The problem's fields go both ways through ATTNKIT_PROBLEM_FIELDS
// (attnkit/plugin.h): C member and C++ member share a name, and the kind
// says how a value converts (FieldToC / FieldFromC above).
#define ATTNKIT_PROBLEM_TO_C(kind, name) \
  FieldToC(p.name, &c.name ATTNKIT_LIST_COUNT(kind, c, name));
#define ATTNKIT_PROBLEM_FROM_C(kind, name) \
  ATTNKIT_RETURN_IF_ERROR(FieldFromC(c.name ATTNKIT_LIST_COUNT(kind, c, name), #name, &p.name));

attnkit_problem ProblemToC(const AttentionProblem& p) {
  attnkit_problem c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_PROBLEM_TO_C)
  return c;
}

absl::StatusOr<AttentionProblem> ProblemFromC(const attnkit_problem& c) {
  AttentionProblem p;
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_PROBLEM_FROM_C)
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

#define ATTNKIT_TENSOR_TO_C(kind, name) c.name = TensorToC(a.name);
#define ATTNKIT_TENSOR_FROM_C(kind, name) \
  ATTNKIT_RETURN_IF_ERROR(TensorFieldFromC(c.name, #name, &a.name));

namespace {
// TensorFromC into *out (a statement per table row: no temporaries whose
// names would repeat on the one line a table expands to).
absl::Status TensorFieldFromC(const attnkit_tensor& c, const char* field, TensorView* out) {
  absl::StatusOr<TensorView> t = TensorFromC(c, field);
  if (!t.ok()) return t.status();
  *out = *t;
  return absl::OkStatus();
}
}  // namespace

attnkit_args ArgsToC(const AttentionArgs& a) {
  attnkit_args c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  ATTNKIT_ARGS_FIELDS(ATTNKIT_TENSOR_TO_C)
  return c;
}

absl::StatusOr<AttentionArgs> ArgsFromC(const attnkit_args& c) {
  AttentionArgs a;
  ATTNKIT_ARGS_FIELDS(ATTNKIT_TENSOR_FROM_C)
  return a;
}

attnkit_grads GradsToC(const GradArgs& a) {
  attnkit_grads c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  ATTNKIT_GRADS_FIELDS(ATTNKIT_TENSOR_TO_C)
  return c;
}

absl::StatusOr<GradArgs> GradsFromC(const attnkit_grads& c) {
  GradArgs a;
  ATTNKIT_GRADS_FIELDS(ATTNKIT_TENSOR_FROM_C)
  return a;
}

// Capabilities through ATTNKIT_CAPS_FIELDS: C field, C++ member path.
#define ATTNKIT_CAPS_TO_C(kind, name, member) \
  FieldToC(caps.member, &c.name ATTNKIT_LIST_COUNT(kind, c, name));
#define ATTNKIT_CAPS_FROM_C(kind, name, member) \
  CapsFieldFromC(c.name ATTNKIT_LIST_COUNT(kind, c, name), &caps.member);

attnkit_caps CapsToC(const Capabilities& caps) {
  attnkit_caps c;
  std::memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  ATTNKIT_CAPS_FIELDS(ATTNKIT_CAPS_TO_C)
  return c;
}

Capabilities CapsFromC(const attnkit_caps& c) {
  Capabilities caps;
  ATTNKIT_CAPS_FIELDS(ATTNKIT_CAPS_FROM_C)
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

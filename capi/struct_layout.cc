// attnkit_struct_layout and attnkit_struct_size: each C struct's fields
// (name, offset, size, type) as this library was compiled, expanded from
// the same field tables (ATTNKIT_*_FIELDS in attnkit/plugin.h and
// attnkit/attnkit.h) that declare the structs, so a binding built from
// them cannot drift from the headers. A field's type is named from its C
// type, so a new kind of field needs no change here.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnkit/attnkit.h"
#include "capi/internal.h"
#include "io/json_writer.h"

namespace attnkit::capi {
namespace {

// The layout's name of each C type a table declares (attnkit/abi_fields.h),
// by the member's exact type (an array stays an array).
template <typename T>
struct CType;
#define ATTNKIT_C_TYPE(T, text)                \
  template <>                                  \
  struct CType<T> {                            \
    static std::string Name() { return text; } \
  };
ATTNKIT_C_TYPE(int32_t, "i32")
ATTNKIT_C_TYPE(uint32_t, "u32")
ATTNKIT_C_TYPE(int64_t, "i64")
ATTNKIT_C_TYPE(uint64_t, "u64")
ATTNKIT_C_TYPE(float, "f32")
ATTNKIT_C_TYPE(void*, "ptr")
ATTNKIT_C_TYPE(const int64_t*, "ptr_i64")
ATTNKIT_C_TYPE(const char*, "cstr")
ATTNKIT_C_TYPE(int64_t[4], "i64[4]")
ATTNKIT_C_TYPE(attnkit_tensor, "attnkit_tensor")
ATTNKIT_C_TYPE(attnkit_caps, "attnkit_caps")
#undef ATTNKIT_C_TYPE
template <size_t N>
struct CType<char[N]> {
  static std::string Name() { return absl::StrCat("char[", N, "]"); }
};

// The fields of one struct instance, in the order they are added.
class FieldList {
 public:
  explicit FieldList(const void* base) : base_(static_cast<const char*>(base)) {}

  template <typename T>
  void Add(const char* name, const T& member) {
    w_.BeginObject().Field("name", name);
    w_.Field("offset", static_cast<int64_t>(reinterpret_cast<const char*>(&member) - base_));
    w_.Field("size", static_cast<int64_t>(sizeof(T)));
    w_.Field("type", CType<T>::Name()).EndObject();
  }
  // A list field: its pointer, then its count (ATTNKIT_LIST_COUNT).
  void Add(const char* name, const int64_t* const& list, const int64_t& count) {
    Add(name, list);
    Add(absl::StrCat("num_", name).c_str(), count);
  }
  // struct_size first, for the structs that have one (all but the tensor).
  template <typename S>
  auto AddStructSize(const S& s, int) -> decltype(s.struct_size, void()) {
    Add("struct_size", s.struct_size);
  }
  template <typename S>
  void AddStructSize(const S&, long) {}

  JsonWriter& writer() { return w_; }

 private:
  const char* base_;
  JsonWriter w_;
};

// A table row as a FieldList entry, for tables of X(KIND, name) and of
// X(KIND, name, cpp_member); `fields` and `s` are the expanding scope's.
#define ATTNKIT_LAYOUT_ROW(kind, name) fields.Add(#name, s.name ATTNKIT_LIST_COUNT(kind, s, name));
#define ATTNKIT_LAYOUT_ROW3(kind, name, member) ATTNKIT_LAYOUT_ROW(kind, name)

// The StructLayout of struct S from its table.
#define ATTNKIT_STRUCT_LAYOUT(S, TABLE, ROW)                                          \
  [] {                                                                                \
    const S s{};                                                                      \
    FieldList fields(&s);                                                             \
    JsonWriter& w = fields.writer();                                                  \
    w.BeginObject().Field("name", #S).Field("size", static_cast<int64_t>(sizeof(S))); \
    w.Key("fields").BeginArray();                                                     \
    fields.AddStructSize(s, 0);                                                       \
    TABLE(ROW)                                                                        \
    w.EndArray().EndObject();                                                         \
    return StructLayout{#S, sizeof(S), w.str()};                                      \
  }()

}  // namespace

const StructLayout* FindStructLayout(const char* name) {
  if (name == nullptr) return nullptr;
  static const std::vector<StructLayout>* const layouts = new std::vector<StructLayout>{
      ATTNKIT_STRUCT_LAYOUT(attnkit_problem, ATTNKIT_PROBLEM_FIELDS, ATTNKIT_LAYOUT_ROW),
      ATTNKIT_STRUCT_LAYOUT(attnkit_tensor, ATTNKIT_TENSOR_FIELDS, ATTNKIT_LAYOUT_ROW),
      ATTNKIT_STRUCT_LAYOUT(attnkit_args, ATTNKIT_ARGS_FIELDS, ATTNKIT_LAYOUT_ROW),
      ATTNKIT_STRUCT_LAYOUT(attnkit_caps, ATTNKIT_CAPS_FIELDS, ATTNKIT_LAYOUT_ROW3),
      ATTNKIT_STRUCT_LAYOUT(attnkit_backend_info, ATTNKIT_BACKEND_INFO_FIELDS, ATTNKIT_LAYOUT_ROW),
      ATTNKIT_STRUCT_LAYOUT(attnkit_run_result, ATTNKIT_RUN_RESULT_FIELDS, ATTNKIT_LAYOUT_ROW),
      ATTNKIT_STRUCT_LAYOUT(attnkit_grads, ATTNKIT_GRADS_FIELDS, ATTNKIT_LAYOUT_ROW),
  };
  for (const StructLayout& layout : *layouts) {
    if (std::strcmp(layout.name, name) == 0) return &layout;
  }
  return nullptr;
}

}  // namespace attnkit::capi

extern "C" const char* attnkit_struct_layout(const char* name) {
  const attnkit::capi::StructLayout* layout = attnkit::capi::FindStructLayout(name);
  return layout != nullptr ? layout->json.c_str() : nullptr;
}

extern "C" size_t attnkit_struct_size(const char* name) {
  const attnkit::capi::StructLayout* layout = attnkit::capi::FindStructLayout(name);
  return layout != nullptr ? layout->size : 0;
}

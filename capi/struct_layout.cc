// attnkit_struct_layout: each C struct's fields (name, offset, size, type)
// as this library was compiled, expanded from the same field tables
// (ATTNKIT_*_FIELDS in attnkit/plugin.h and attnkit/attnkit.h) that declare
// the structs, so a binding built from it cannot drift from the headers.
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnkit/attnkit.h"

namespace {

struct FieldLayout {
  std::string name;
  size_t offset;
  size_t size;
  std::string type;
};

// The type each kind of field is described as (attnkit/abi_fields.h).
#define ATTNKIT_LAYOUT_TYPE_DTYPE "i32"
#define ATTNKIT_LAYOUT_TYPE_LAYOUT "i32"
#define ATTNKIT_LAYOUT_TYPE_MASK "i32"
#define ATTNKIT_LAYOUT_TYPE_ALIGNMENT "i32"
#define ATTNKIT_LAYOUT_TYPE_I32 "i32"
#define ATTNKIT_LAYOUT_TYPE_BOOL "i32"
#define ATTNKIT_LAYOUT_TYPE_I64 "i64"
#define ATTNKIT_LAYOUT_TYPE_U64 "u64"
#define ATTNKIT_LAYOUT_TYPE_F32 "f32"
#define ATTNKIT_LAYOUT_TYPE_STR "cstr"
#define ATTNKIT_LAYOUT_TYPE_I64_LIST "ptr_i64"
#define ATTNKIT_LAYOUT_TYPE_DTYPE_SET "u32"
#define ATTNKIT_LAYOUT_TYPE_MASK_SET "u32"
#define ATTNKIT_LAYOUT_TYPE_ALIGNMENT_SET "u32"
#define ATTNKIT_LAYOUT_TYPE_LAYOUT_SET "u32"
#define ATTNKIT_LAYOUT_TYPE_PTR "ptr"
#define ATTNKIT_LAYOUT_TYPE_I64_4 "i64[4]"
#define ATTNKIT_LAYOUT_TYPE_CHARS64 "char[64]"
#define ATTNKIT_LAYOUT_TYPE_CHARS256 "char[256]"
#define ATTNKIT_LAYOUT_TYPE_CHARS512 "char[512]"
#define ATTNKIT_LAYOUT_TYPE_TENSOR "attnkit_tensor"
#define ATTNKIT_LAYOUT_TYPE_CAPS "attnkit_caps"

// A list field's count follows its pointer; no other kind has a second entry.
#define ATTNKIT_LAYOUT_COUNT_I64_LIST(S, name) \
  out.push_back({"num_" #name, offsetof(S, num_##name), sizeof(int64_t), "i64"});
#define ATTNKIT_LAYOUT_NO_COUNT(S, name)
#define ATTNKIT_LAYOUT_COUNT_DTYPE ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_LAYOUT ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_MASK ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_ALIGNMENT ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_I32 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_BOOL ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_I64 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_U64 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_F32 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_STR ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_DTYPE_SET ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_MASK_SET ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_ALIGNMENT_SET ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_LAYOUT_SET ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_PTR ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_I64_4 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_CHARS64 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_CHARS256 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_CHARS512 ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_TENSOR ATTNKIT_LAYOUT_NO_COUNT
#define ATTNKIT_LAYOUT_COUNT_CAPS ATTNKIT_LAYOUT_NO_COUNT

#define ATTNKIT_LAYOUT_FIELD(S, kind, name)                                        \
  out.push_back({#name, offsetof(S, name), sizeof(static_cast<S*>(nullptr)->name), \
                 ATTNKIT_LAYOUT_TYPE_##kind});                                     \
  ATTNKIT_LAYOUT_COUNT_##kind(S, name)

#define ATTNKIT_LAYOUT_STRUCT_SIZE(S) \
  out.push_back({"struct_size", offsetof(S, struct_size), sizeof(uint32_t), "u32"});

std::vector<FieldLayout> ProblemLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_problem, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_problem)
  ATTNKIT_PROBLEM_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> TensorLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_tensor, kind, name)
  ATTNKIT_TENSOR_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> ArgsLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_args, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_args)
  ATTNKIT_ARGS_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> CapsLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name, member) ATTNKIT_LAYOUT_FIELD(attnkit_caps, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_caps)
  ATTNKIT_CAPS_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> GradsLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_grads, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_grads)
  ATTNKIT_GRADS_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> BackendInfoLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_backend_info, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_backend_info)
  ATTNKIT_BACKEND_INFO_FIELDS(X)
#undef X
  return out;
}

std::vector<FieldLayout> RunResultLayout() {
  std::vector<FieldLayout> out;
#define X(kind, name) ATTNKIT_LAYOUT_FIELD(attnkit_run_result, kind, name)
  ATTNKIT_LAYOUT_STRUCT_SIZE(attnkit_run_result)
  ATTNKIT_RUN_RESULT_FIELDS(X)
#undef X
  return out;
}

std::string LayoutJson(const char* name, size_t size, const std::vector<FieldLayout>& fields) {
  std::string json = absl::StrCat("{\"name\": \"", name, "\", \"size\": ", size, ", \"fields\": [");
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldLayout& f = fields[i];
    absl::StrAppend(&json, i == 0 ? "" : ", ", "{\"name\": \"", f.name,
                    "\", \"offset\": ", f.offset, ", \"size\": ", f.size, ", \"type\": \"", f.type,
                    "\"}");
  }
  absl::StrAppend(&json, "]}");
  return json;
}

}  // namespace

extern "C" const char* attnkit_struct_layout(const char* name) {
  if (name == nullptr) return nullptr;
  struct Entry {
    const char* name;
    std::string json;
  };
  static const std::vector<Entry>* const layouts = new std::vector<Entry>{
      {"attnkit_problem", LayoutJson("attnkit_problem", sizeof(attnkit_problem), ProblemLayout())},
      {"attnkit_tensor", LayoutJson("attnkit_tensor", sizeof(attnkit_tensor), TensorLayout())},
      {"attnkit_args", LayoutJson("attnkit_args", sizeof(attnkit_args), ArgsLayout())},
      {"attnkit_caps", LayoutJson("attnkit_caps", sizeof(attnkit_caps), CapsLayout())},
      {"attnkit_grads", LayoutJson("attnkit_grads", sizeof(attnkit_grads), GradsLayout())},
      {"attnkit_backend_info",
       LayoutJson("attnkit_backend_info", sizeof(attnkit_backend_info), BackendInfoLayout())},
      {"attnkit_run_result",
       LayoutJson("attnkit_run_result", sizeof(attnkit_run_result), RunResultLayout())},
  };
  for (const Entry& e : *layouts) {
    if (std::strcmp(e.name, name) == 0) return e.json.c_str();
  }
  return nullptr;
}

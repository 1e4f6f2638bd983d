// attnkit_config_schema: AttentionConfig's fields from its protobuf
// descriptor, as JSON, so a binding's config type follows config.proto.
#include <string>

#include "absl/strings/str_cat.h"
#include "attnkit/attnkit.h"
#include "capi/internal.h"
#include "core/config.pb.h"
#include "core/status_macros.h"
#include "io/json_text.h"

namespace attnkit::capi {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

std::string JsonString(absl::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

const char* TypeName(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "int";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "float";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "bool";
    case FieldDescriptor::CPPTYPE_STRING:
      return "string";
    case FieldDescriptor::CPPTYPE_ENUM:
      return "enum";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "message";
  }
  return "unknown";
}

// The value an unset field reads as, as JSON (proto3: zero, "", false, the
// enum's first value; null where the field has presence).
std::string DefaultJson(const FieldDescriptor& f) {
  if (f.is_repeated()) return "[]";
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE || f.has_presence()) return "null";
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return "false";
    case FieldDescriptor::CPPTYPE_STRING:
      return "\"\"";
    case FieldDescriptor::CPPTYPE_ENUM:
      return JsonString(f.enum_type()->value(0)->name());
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "0.0";
    default:
      return "0";
  }
}

std::string MessageSchema(const Descriptor& d) {
  std::string json = absl::StrCat("{\"name\": ", JsonString(d.name()), ", \"fields\": [");
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    absl::StrAppend(&json, i == 0 ? "" : ", ", "{\"name\": ", JsonString(f.name()),
                    ", \"type\": \"", TypeName(f),
                    "\", \"repeated\": ", f.is_repeated() ? "true" : "false",
                    ", \"default\": ", DefaultJson(f));
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      absl::StrAppend(&json, ", \"values\": [");
      for (int v = 0; v < f.enum_type()->value_count(); ++v) {
        absl::StrAppend(&json, v == 0 ? "" : ", ", JsonString(f.enum_type()->value(v)->name()));
      }
      absl::StrAppend(&json, "]");
    }
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::StrAppend(&json, ", \"message\": ", MessageSchema(*f.message_type()));
    }
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "]}");
  return json;
}

}  // namespace
}  // namespace attnkit::capi

extern "C" int32_t attnkit_config_schema(char** json, char* err, size_t err_size) {
  return attnkit::capi::Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireNonNull(json, "json"));
    *json = attnkit::capi::NewCString(
        attnkit::capi::MessageSchema(*attnkit::AttentionConfig::descriptor()));
    return absl::OkStatus();
  });
}

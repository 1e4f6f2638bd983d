// attnkit_config_schema: AttentionConfig's fields from its protobuf
// descriptor, as JSON, so a binding's config type follows config.proto.
#include <string>

#include "attnkit/attnkit.h"
#include "capi/internal.h"
#include "core/config.pb.h"
#include "core/status_macros.h"
#include "io/json_text.h"
#include "io/json_writer.h"

namespace attnkit::capi {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

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
    case FieldDescriptor::CPPTYPE_ENUM: {
      std::string name;
      AppendJsonString(f.enum_type()->value(0)->name(), &name);
      return name;
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "0.0";
    default:
      return "0";
  }
}

void WriteMessageSchema(const Descriptor& d, JsonWriter& w) {
  w.BeginObject().Field("name", d.name());
  w.Key("fields").BeginArray();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    w.BeginObject().Field("name", f.name()).Field("type", TypeName(f));
    w.Field("repeated", f.is_repeated()).Key("default").Raw(DefaultJson(f));
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      w.Key("values").BeginArray();
      for (int v = 0; v < f.enum_type()->value_count(); ++v)
        w.String(f.enum_type()->value(v)->name());
      w.EndArray();
    }
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      w.Key("message");
      WriteMessageSchema(*f.message_type(), w);
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
}

}  // namespace
}  // namespace attnkit::capi

extern "C" int32_t attnkit_config_schema(char** json, char* err, size_t err_size) {
  return attnkit::capi::Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(attnkit::capi::RequireNonNull(json, "json"));
    attnkit::JsonWriter w;
    attnkit::capi::WriteMessageSchema(*attnkit::AttentionConfig::descriptor(), w);
    *json = attnkit::capi::NewCString(w.str());
    return absl::OkStatus();
  });
}

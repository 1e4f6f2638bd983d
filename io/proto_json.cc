#include "io/proto_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "io/json_text.h"

namespace attnkit {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

class Printer {
 public:
  explicit Printer(int indent) : indent_(indent) {}

  void Object(const Message& m, int depth, std::string* out) const {
    const Reflection* r = m.GetReflection();
    const auto* d = m.GetDescriptor();
    out->push_back('{');
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (i > 0) out->push_back(',');
      Newline(depth + 1, out);
      AppendJsonString(f->name(), out);
      out->append(indent_ > 0 ? ": " : ":");
      if (f->is_map()) {
        Map(m, f, depth + 1, out);
      } else if (f->is_repeated()) {
        const int n = r->FieldSize(m, f);
        out->push_back('[');
        for (int j = 0; j < n; ++j) {
          if (j > 0) out->push_back(',');
          if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) Newline(depth + 2, out);
          Value(m, f, j, depth + 2, out);
        }
        if (n > 0 && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) Newline(depth + 1, out);
        out->push_back(']');
      } else if (f->has_presence() && f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE &&
                 !r->HasField(m, f)) {
        out->append("null");  // an unset `optional` scalar
      } else {
        Value(m, f, -1, depth + 1, out);
      }
    }
    if (d->field_count() > 0) Newline(depth, out);
    out->push_back('}');
  }

 private:
  void Newline(int depth, std::string* out) const {
    if (indent_ <= 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(depth * indent_), ' ');
  }

  // Field f of m (element `index` when repeated, -1 when singular).
  void Value(const Message& m, const FieldDescriptor* f, int index, int depth,
             std::string* out) const {
    const Reflection* r = m.GetReflection();
    const bool rep = index >= 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        absl::StrAppend(out, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        absl::StrAppend(out, rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        absl::StrAppend(out, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        absl::StrAppend(out, rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        AppendJsonNumber(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), out, 6, 9);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        AppendJsonNumber(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), out);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false");
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* e = rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f);
        AppendJsonString(e->name(), out);
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string s = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
        if (f->type() == FieldDescriptor::TYPE_BYTES) {
          AppendJsonString(absl::Base64Escape(s), out);
        } else {
          AppendJsonString(s, out);
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        Object(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), depth, out);
        break;
    }
  }

  // A map field as an object with sorted keys (maps have no order of their own).
  void Map(const Message& m, const FieldDescriptor* f, int depth, std::string* out) const {
    const Reflection* r = m.GetReflection();
    std::vector<std::pair<std::string, const Message*>> entries;
    for (int j = 0; j < r->FieldSize(m, f); ++j) {
      const Message& entry = r->GetRepeatedMessage(m, f, j);
      const FieldDescriptor* key = entry.GetDescriptor()->map_key();
      std::string k;
      Value(entry, key, -1, 0, &k);
      if (!k.empty() && k.front() == '"') k = k.substr(1, k.size() - 2);  // re-quoted below
      entries.emplace_back(std::move(k), &entry);
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    out->push_back('{');
    for (size_t j = 0; j < entries.size(); ++j) {
      if (j > 0) out->push_back(',');
      Newline(depth + 1, out);
      AppendJsonString(entries[j].first, out);
      out->append(indent_ > 0 ? ": " : ":");
      const Message& entry = *entries[j].second;
      Value(entry, entry.GetDescriptor()->map_value(), -1, depth + 1, out);
    }
    if (!entries.empty()) Newline(depth, out);
    out->push_back('}');
  }

  int indent_;
};

}  // namespace

std::string ProtoToJson(const Message& message, int indent) {
  std::string out;
  Printer(indent).Object(message, 0, &out);
  if (indent > 0) out.push_back('\n');
  return out;
}

absl::Status ProtoFromJson(absl::string_view json, absl::string_view source, Message* message,
                           bool ignore_unknown) {
  message->Clear();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = ignore_unknown;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid ",
                                                   message->GetDescriptor()->name(),
                                                   " in JSON: ", std::string(status.message())));
  }
  return absl::OkStatus();
}

}  // namespace attnkit

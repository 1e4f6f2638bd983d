#include "core/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/version.h"

namespace attnkit {
namespace {

void AppendEscaped(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

void JsonWriter::Newline() {
  out_.push_back('\n');
  out_.append(2 * has_element_.size(), ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (has_element_.empty()) return;
  if (has_element_.back()) out_.push_back(',');
  has_element_.back() = true;
  Newline();
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  const bool any = has_element_.back();
  has_element_.pop_back();
  if (any) Newline();
  out_.push_back('}');
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndArray() { return EndObject(), out_.back() = ']', *this; }

JsonWriter& JsonWriter::Key(absl::string_view key) {
  BeforeValue();
  AppendEscaped(key, &out_);
  out_.append(": ");
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view s) {
  BeforeValue();
  AppendEscaped(s, &out_);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t v) {
  BeforeValue();
  absl::StrAppend(&out_, v);
  return *this;
}

JsonWriter& JsonWriter::Double(double v) {
  BeforeValue();
  if (std::isnan(v)) {
    out_.append("\"NaN\"");
  } else if (std::isinf(v)) {
    out_.append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  } else {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.15g", v);
    if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
    out_.append(buf);
  }
  return *this;
}

JsonWriter& JsonWriter::Bool(bool v) {
  BeforeValue();
  out_.append(v ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_.append("null");
  return *this;
}

JsonWriter& JsonWriter::Raw(absl::string_view json) {
  BeforeValue();
  while (!json.empty() && (json.back() == '\n' || json.back() == ' ')) json.remove_suffix(1);
  const std::string indent(2 * has_element_.size(), ' ');
  for (const char c : json) {
    out_.push_back(c);
    if (c == '\n') out_.append(indent);
  }
  return *this;
}

void WriteBuildInfo(JsonWriter& w) {
  w.Key("attnkit").BeginObject();
  w.Field("version", AttnkitVersion()).Field("commit", AttnkitCommit());
  w.EndObject();
}

}  // namespace attnkit

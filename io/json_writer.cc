#include "io/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "io/json_text.h"
#include "platform/version.h"

namespace attnkit {

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
  AppendJsonString(key, &out_);
  out_.append(": ");
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view s) {
  BeforeValue();
  AppendJsonString(s, &out_);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t v) {
  BeforeValue();
  absl::StrAppend(&out_, v);
  return *this;
}

JsonWriter& JsonWriter::Double(double v) {
  BeforeValue();
  AppendJsonNumber(v, &out_);
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

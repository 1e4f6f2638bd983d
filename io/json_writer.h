// A small streaming JSON writer for the CLI's reports that are not protos
// (backends, cost, generate, fuzz): objects and arrays nest, commas and
// indentation are placed for you, strings are escaped, integers stay
// integers. Proto reports go through io/proto_json.h and are inserted
// whole with Raw().
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("backends").BeginArray();
//   w.BeginObject().Field("name", "highway").Field("available", true).EndObject();
//   w.EndArray();
//   w.EndObject();
//   std::string json = w.str();
#ifndef ATTNKIT_IO_JSON_WRITER_H_
#define ATTNKIT_IO_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnkit {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view s);
  JsonWriter& Int(int64_t v);
  JsonWriter& Double(double v);  // non-finite values as proto3's strings
  JsonWriter& Bool(bool v);
  JsonWriter& Null();
  // Already-formatted JSON (a ProtoToJson output), re-indented to fit.
  JsonWriter& Raw(absl::string_view json);

  JsonWriter& Field(absl::string_view key, absl::string_view v) { return Key(key).String(v); }
  JsonWriter& Field(absl::string_view key, const char* v) { return Key(key).String(v); }
  JsonWriter& Field(absl::string_view key, int64_t v) { return Key(key).Int(v); }
  JsonWriter& Field(absl::string_view key, int v) { return Key(key).Int(v); }
  JsonWriter& Field(absl::string_view key, double v) { return Key(key).Double(v); }
  JsonWriter& Field(absl::string_view key, bool v) { return Key(key).Bool(v); }

  // The document, with a final newline.
  std::string str() const { return out_ + "\n"; }

 private:
  void BeforeValue();
  void Newline();

  std::string out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// {"version": ..., "commit": ...} of this build, as every report carries it.
void WriteBuildInfo(JsonWriter& w);

}  // namespace attnkit

#endif  // ATTNKIT_IO_JSON_WRITER_H_

// JSON for attnkit's reports and configs, as people and scripts read them:
// every field printed (defaults included, so each record has one shape),
// field names as in the .proto, enums by name, and 64-bit integers as JSON
// numbers (protobuf's own printer quotes them, which breaks `jq` arithmetic
// and Python's json). An unset `optional` field prints as null. Reading back
// goes through protobuf's parser, which accepts numbers and strings alike.
#ifndef ATTNKIT_IO_PROTO_JSON_H_
#define ATTNKIT_IO_PROTO_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace attnkit {

// `indent` spaces per level; 0 prints the whole message on one line.
std::string ProtoToJson(const google::protobuf::Message& message, int indent = 2);

// Parses `json` into `message` (cleared first). Unknown fields are an error
// unless `ignore_unknown`; InvalidArgument names `source` and protobuf's
// reason.
absl::Status ProtoFromJson(absl::string_view json, absl::string_view source,
                           google::protobuf::Message* message, bool ignore_unknown = false);

}  // namespace attnkit

#endif  // ATTNKIT_IO_PROTO_JSON_H_

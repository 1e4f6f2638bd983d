// Reading AttentionConfig text protos, with parse errors that give the line
// and column, and writing files whole or not at all.
#ifndef ATTNKIT_IO_CONFIG_IO_H_
#define ATTNKIT_IO_CONFIG_IO_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config.pb.h"
#include "google/protobuf/message.h"

namespace attnkit {

// Parses text format. `source` names the text in errors ("cfg.textproto");
// errors give the line and column of the first problem ("SOURCE: line L,
// column C: message", without "SOURCE: " when source is empty), and nothing
// is logged.
absl::Status ParseTextProto(absl::string_view text, absl::string_view source,
                            google::protobuf::Message* message);
absl::StatusOr<AttentionConfig> ParseConfigText(absl::string_view text, absl::string_view source);
absl::StatusOr<AttentionConfig> LoadConfigFile(const std::string& path);
std::string ConfigToText(const AttentionConfig& config);

// Reads a whole file; NotFound / PermissionDenied naming the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes `contents` to a temporary file beside `path`, then renames it over
// `path`: readers see the old file or the whole new one, never a part.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);
// Several files as one set: all are written to temporaries first (a failure
// there leaves nothing behind), then each is renamed into place; when a
// rename fails, the files already replaced get their old content back (and
// new ones are removed), so either every file is new or none is.
absl::Status WriteFilesAtomically(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace attnkit

#endif  // ATTNKIT_IO_CONFIG_IO_H_

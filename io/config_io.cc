#include "io/config_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace attnkit {
namespace {

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!has_error_) {
      has_error_ = true;
      line_ = line;
      column_ = column;
      message_ = message;
    }
  }
  void AddWarning(int, int, const std::string&) override {}
  bool has_error() const { return has_error_; }
  // "SOURCE: line L, column C: message", or without "SOURCE: " when source
  // is empty. The parser counts from 0; people count from 1.
  std::string Describe(absl::string_view source) const {
    return absl::StrFormat("%s%sline %d, column %d: %s", source, source.empty() ? "" : ": ",
                           line_ + 1, column_ + 1, message_);
  }

 private:
  bool has_error_ = false;
  int line_ = 0, column_ = 0;
  std::string message_;
};

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string msg = absl::StrFormat("%s %s: %s", what, path, std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view source,
                            google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), message)) {
    if (errors.has_error()) return absl::InvalidArgumentError(errors.Describe(source));
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%snot a valid %s", source, source.empty() ? "" : ": ", message->GetTypeName()));
  }
  return absl::OkStatus();
}

absl::StatusOr<AttentionConfig> ParseConfigText(absl::string_view text, absl::string_view source) {
  AttentionConfig config;
  ATTNKIT_RETURN_IF_ERROR(ParseTextProto(text, source, &config));
  return config;
}

absl::StatusOr<AttentionConfig> LoadConfigFile(const std::string& path) {
  ATTNKIT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseConfigText(text, path);
}

std::string ConfigToText(const AttentionConfig& config) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(config, &out);
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("cannot open", path);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoStatus("cannot read", path);
  return contents.str();
}

namespace {

// Writes `contents` to a new temporary file beside `path`; returns its name.
absl::StatusOr<std::string> WriteTemporary(const std::string& path, absl::string_view contents) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(&tmp[0]);
  if (fd < 0) return ErrnoStatus("cannot create a temporary file for", path);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status s = ErrnoStatus("cannot write", tmp);
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const absl::Status s = ErrnoStatus("cannot flush", tmp);
    unlink(tmp.c_str());
    return s;
  }
  chmod(tmp.c_str(), 0644);  // mkstemp creates 0600
  return tmp;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WriteFilesAtomically({{path, std::string(contents)}});
}

absl::Status WriteFilesAtomically(const std::vector<std::pair<std::string, std::string>>& files) {
  // 1. Every new content into a temporary beside its file.
  std::vector<std::string> temps;
  auto remove_temps = [&](size_t from) {
    for (size_t i = from; i < temps.size(); ++i) unlink(temps[i].c_str());
  };
  for (const auto& [path, contents] : files) {
    auto tmp = WriteTemporary(path, contents);
    if (!tmp.ok()) {
      remove_temps(0);
      return tmp.status();
    }
    temps.push_back(*tmp);
  }
  // 2. A hard link to each existing file, so that a failed rename further on
  // can put back the files already replaced. A target that cannot be linked
  // (a directory, a file system without links) stops here, nothing replaced.
  std::vector<std::string> backups(files.size());  // "" = the file did not exist
  auto remove_backups = [&] {
    for (const std::string& b : backups) {
      if (!b.empty()) unlink(b.c_str());
    }
  };
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string backup = temps[i] + ".old";
    if (link(files[i].first.c_str(), backup.c_str()) == 0) {
      backups[i] = backup;
    } else if (errno != ENOENT) {
      const absl::Status s = ErrnoStatus("cannot replace", files[i].first);
      remove_backups();
      remove_temps(0);
      return s;
    }
  }
  // 3. Rename each into place; on a failure, undo the renames done so far.
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename(temps[i].c_str(), files[i].first.c_str()) != 0) {
      const absl::Status s = ErrnoStatus("cannot rename the temporary file onto", files[i].first);
      for (size_t j = 0; j < i; ++j) {
        if (backups[j].empty()) {
          unlink(files[j].first.c_str());
        } else if (std::rename(backups[j].c_str(), files[j].first.c_str()) == 0) {
          backups[j].clear();
        }
      }
      remove_temps(i);
      remove_backups();
      return s;
    }
  }
  remove_backups();
  return absl::OkStatus();
}

}  // namespace attnkit

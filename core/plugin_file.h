// Checks that a file can be handed to dlopen: an ELF shared object for this
// machine whose program headers and loadable segments lie inside the file.
// glibc's loader trusts these fields; a truncated or mangled file makes it
// fault (SIGBUS zero-filling a segment past the end of the file) instead of
// failing, so the registry checks them first.
#ifndef ATTNKIT_CORE_PLUGIN_FILE_H_
#define ATTNKIT_CORE_PLUGIN_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace attnkit {

// OK, or InvalidArgument "plugin PATH: not a shared library for this
// machine: <field> <value> <rule>"; NotFound when the file cannot be read.
absl::Status CheckPluginFile(const std::string& path);

// The same checks on the file's bytes (`file_size` may exceed bytes.size()
// when only the first part was read; segments are checked against it).
absl::Status CheckElfImage(absl::string_view bytes, uint64_t file_size);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_PLUGIN_FILE_H_

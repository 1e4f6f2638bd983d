// Checks that a file can be handed to dlopen: an ELF shared object for this
// machine that passes CheckElfImage (plugin/elf_image.h). glibc's loader trusts
// the file; a truncated or mangled one makes it fault instead of failing, so
// the registry checks first.
#ifndef ATTNKIT_PLUGIN_PLUGIN_FILE_H_
#define ATTNKIT_PLUGIN_PLUGIN_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace attnkit {

// OK, or InvalidArgument "plugin PATH: not a shared library for this
// machine: <field> <value> <rule>"; NotFound when the file cannot be read.
absl::Status CheckPluginFile(const std::string& path);

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_PLUGIN_FILE_H_

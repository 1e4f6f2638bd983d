// Structural checks of an ELF shared object before it reaches dlopen.
//
// glibc's loader trusts the file it maps. A segment past the end of the file,
// a dynamic table outside the mapped image, a relocation aimed outside it or
// at read-only memory, a hash table with no buckets or a symbol version with
// no definition makes it fault (SIGSEGV, SIGBUS, SIGFPE) or abort instead of
// returning an error. CheckElfImage refuses such files with a status naming
// the field, its value and the rule, so a truncated, foreign or damaged file
// becomes an error.
//
// It does not make a hostile library safe: relocations, IFUNC resolvers and
// initialisers are code that dlopen runs, and a plugin is trusted code.
#ifndef ATTNKIT_PLUGIN_ELF_IMAGE_H_
#define ATTNKIT_PLUGIN_ELF_IMAGE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace attnkit {

// `image` is the whole file. OK, or InvalidArgument "<field> <value> <rule>".
// Checks, in order: the ELF header (64-bit, little-endian, ET_DYN, this
// machine); the program headers (loadable segments inside the file, in
// ascending order, not overlapping; dynamic, TLS, note, RELRO and EH-frame
// segments inside loaded memory); the dynamic table (terminated, every
// address inside a loadable segment, tables inside the file image, strings
// inside the string table); every relocation (target inside writable loaded
// memory, symbol inside the symbol table); the GNU and SysV hash tables; and
// the symbol-version tables.
absl::Status CheckElfImage(absl::string_view image);

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_ELF_IMAGE_H_

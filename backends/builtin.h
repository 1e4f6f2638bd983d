// The explicit list of built-in backends, and the process-wide registry that
// tools use: built-ins plus the plugins named by ATTNKIT_PLUGIN_PATH.
#ifndef ATTNKIT_BACKENDS_BUILTIN_H_
#define ATTNKIT_BACKENDS_BUILTIN_H_

#include <string>
#include <vector>

#include "core/registry.h"

namespace attnkit {

// Registers every backend linked into this binary.
void RegisterBuiltinBackends(BackendRegistry* registry);

// The static preference order for --backend=auto (fastest first); names not
// registered are ignored.
const std::vector<std::string>& DefaultAutoOrder();

// The process-wide registry, created on first use with the built-ins and the
// plugins listed in $ATTNKIT_PLUGIN_PATH (failures are kept, not fatal).
BackendRegistry& GlobalRegistry();

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BUILTIN_H_

// The explicit list of built-in backends, and the process-wide registry that
// tools use: built-ins plus the plugins named by ATTNKIT_PLUGIN_PATH. Built-in
// backends are linked in but still called through the plugin C ABI
// (include/attnkit/plugin.h), exactly as a loaded plugin is: the static route for
// embedding, and the proof that every backend works behind the C table.
#ifndef ATTNKIT_BACKENDS_BUILTIN_H_
#define ATTNKIT_BACKENDS_BUILTIN_H_

#include <memory>
#include <string>
#include <vector>

#include "plugin/registry.h"

namespace attnkit {

// `backend` behind the C table (exported with plugin/backend_export.h, wrapped
// back with plugin/plugin_table_backend.h), as a plugin exporting it would be.
std::unique_ptr<Backend> LinkedThroughCAbi(std::unique_ptr<Backend> backend);

// The built-in backends by name ("highway", "blas", "reference"), and one of
// them made afresh (nullptr for another name).
std::vector<std::string> BuiltinBackendNames();
std::unique_ptr<Backend> MakeBuiltinBackend(const std::string& name);

// Registers every backend linked into this binary, each LinkedThroughCAbi.
void RegisterBuiltinBackends(BackendRegistry* registry);

// The static preference order for --backend=auto (fastest first); names not
// registered are ignored.
const std::vector<std::string>& DefaultAutoOrder();

// The process-wide registry, created on first use with the built-ins and the
// plugins listed in $ATTNKIT_PLUGIN_PATH (failures are kept, not fatal).
BackendRegistry& GlobalRegistry();

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BUILTIN_H_

// The host's side of the plugin C ABI (include/attnkit/plugin.h): a Backend
// that forwards every call through a backend's C function table. Plugins
// loaded with dlopen (plugin/registry.h) and the built-in backends linked into
// a binary (backends/builtin.h) both run this way, so every backend crosses
// the same boundary.
#ifndef ATTNKIT_PLUGIN_PLUGIN_TABLE_BACKEND_H_
#define ATTNKIT_PLUGIN_PLUGIN_TABLE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnkit/plugin.h"
#include "attnkit/plugin_sdk.h"
#include "core/backend.h"

namespace attnkit {

// OK when this host can use `plugin` (from the file or source `origin`);
// otherwise FailedPrecondition naming origin, the plugin, the field and the
// rule: an unknown abi_version ("built for plugin ABI 7; this attnkit loads
// ABI 1"), a table too short for the fields every version has, or a missing
// required function.
absl::Status CheckPluginTable(const attnkit_plugin* plugin, const std::string& origin);

// Creates backend `index` of a checked `plugin` and wraps it. Errors carry
// the plugin's own message, prefixed with origin.
absl::StatusOr<std::unique_ptr<Backend>> CreatePluginBackend(const attnkit_plugin& plugin,
                                                             uint32_t index,
                                                             const std::string& origin);

// Wraps a backend written with the SDK (include/attnkit/plugin_sdk.h) and linked into
// this binary, through the same C table a loaded plugin would export: the
// static route for embedding.
std::unique_ptr<Backend> AdoptSdkBackend(std::unique_ptr<attnkit_sdk::PluginBackend> backend);

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_PLUGIN_TABLE_BACKEND_H_

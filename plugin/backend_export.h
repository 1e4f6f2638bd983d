// The plugin side of the C ABI for backends written against attnkit::Backend
// (the ones in this repository): each is exported as an attnkit_sdk::PluginBackend,
// whose C table (include/attnkit/plugin_sdk.h) the host loads. A plugin built this way
// carries its own copy of core/ and Abseil, hidden behind the table.
#ifndef ATTNKIT_PLUGIN_BACKEND_EXPORT_H_
#define ATTNKIT_PLUGIN_BACKEND_EXPORT_H_

#include <memory>

#include "attnkit/plugin_sdk.h"
#include "core/backend.h"

namespace attnkit {

std::unique_ptr<attnkit_sdk::PluginBackend> ExportBackend(std::unique_ptr<Backend> backend);

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_BACKEND_EXPORT_H_

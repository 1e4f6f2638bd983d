// The plugin side of the C ABI for backends written against attnkit::Backend
// (the ones in this repository): each is exported as an attnkit_sdk::Backend,
// whose C table (core/plugin_sdk.h) the host loads. A plugin built this way
// carries its own copy of core/ and Abseil, hidden behind the table.
#ifndef ATTNKIT_CORE_BACKEND_EXPORT_H_
#define ATTNKIT_CORE_BACKEND_EXPORT_H_

#include <memory>

#include "core/backend.h"
#include "core/plugin_sdk.h"

namespace attnkit {

std::unique_ptr<attnkit_sdk::Backend> ExportBackend(std::unique_ptr<Backend> backend);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_BACKEND_EXPORT_H_

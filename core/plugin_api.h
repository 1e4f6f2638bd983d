// The one entry point a shared-library backend exports.
//
//   extern "C" const AttnkitPluginV1* attnkit_plugin_entry(void);
//
// The host reads abi_version first and refuses the plugin, naming the file,
// when it differs from ATTNKIT_PLUGIN_ABI_VERSION. Backends cross the
// boundary as C++ objects, so host and plugin must be built from the same
// core/backend.h with the same C++ standard library; any change to that
// header's classes bumps the version.
#ifndef ATTNKIT_CORE_PLUGIN_API_H_
#define ATTNKIT_CORE_PLUGIN_API_H_

#include <cstdint>

#include "core/backend.h"

// 3: Capabilities::deterministic; 4: RunInfo::workspace_allocations and
// Backend::UploadAt; 5: Backend::SetStream.
#define ATTNKIT_PLUGIN_ABI_VERSION 5u
#define ATTNKIT_PLUGIN_ENTRY_SYMBOL "attnkit_plugin_entry"

extern "C" {

struct AttnkitPluginV1 {
  uint32_t abi_version;  // must stay the first member in every version
  uint32_t num_backends;
  // Creates backend `index` (< num_backends); the host owns the result.
  // Returns nullptr on failure.
  attnkit::Backend* (*create_backend)(uint32_t index);
};

typedef const AttnkitPluginV1* (*AttnkitPluginEntryFn)(void);

}  // extern "C"

#endif  // ATTNKIT_CORE_PLUGIN_API_H_

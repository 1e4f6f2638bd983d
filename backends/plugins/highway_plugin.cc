// libattnkit_highway.so: the Highway SIMD CPU backend ("highway") as a plugin behind the C
// ABI, for binaries that load their backends instead of linking them.
#include "attnkit/plugin_sdk.h"
#include "backends/highway/highway_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  return attnkit::ExportBackend(attnkit::MakeHighwayBackend());
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-highway", 1, Create)

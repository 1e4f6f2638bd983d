// libattnkit_reference.so: the fp64 reference backend ("reference") as a plugin behind the C
// ABI, for binaries that load their backends instead of linking them.
#include "attnkit/plugin_sdk.h"
#include "backends/reference/reference_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  return attnkit::ExportBackend(attnkit::MakeReferenceBackend());
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-reference", 1, Create)

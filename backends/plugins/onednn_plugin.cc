// libattnkit_onednn.so: the oneDNN backend ("onednn") as a plugin behind the
// C ABI. It links libdnnl (and OpenMP), which binaries that do not load it
// never need.
#include "attnkit/plugin_sdk.h"
#include "backends/onednn/onednn_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  absl::StatusOr<std::unique_ptr<attnkit::Backend>> backend = attnkit::MakeOneDnnBackend();
  if (!backend.ok()) return nullptr;  // oneDNN cannot run here: no backend
  return attnkit::ExportBackend(*std::move(backend));
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-onednn", 1, Create)

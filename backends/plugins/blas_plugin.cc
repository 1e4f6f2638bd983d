// libattnkit_blas.so: the OpenBLAS backend ("blas") as a plugin behind the C
// ABI, for binaries that load their backends instead of linking them.
#include "attnkit/plugin_sdk.h"
#include "backends/blas/blas_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  return attnkit::ExportBackend(attnkit::MakeBlasBackend());
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-blas", 1, Create)

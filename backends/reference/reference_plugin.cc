// The reference backend built as a shared library ("reference-plugin"), so
// the conformance suite exercises plugin loading end to end.
#include "attnkit/plugin_sdk.h"
#include "backends/reference/reference_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  return attnkit::ExportBackend(attnkit::MakeReferenceBackend("reference-plugin"));
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-reference", 1, Create)

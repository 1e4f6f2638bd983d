// The reference backend built as a shared library ("reference-plugin"), so
// the conformance suite exercises plugin loading end to end.
#include "backends/reference/reference_backend.h"
#include "core/plugin_api.h"

namespace {

attnkit::Backend* CreateBackend(uint32_t index) {
  if (index != 0) return nullptr;
  return attnkit::MakeReferenceBackend("reference-plugin").release();
}

const AttnkitPluginV1 kPlugin = {ATTNKIT_PLUGIN_ABI_VERSION, 1, &CreateBackend};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnkitPluginV1* attnkit_plugin_entry(
    void) {
  return &kPlugin;
}

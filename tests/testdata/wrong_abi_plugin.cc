// A plugin built for another ABI version: the registry must refuse it by name.
#include "core/plugin_api.h"

namespace {
attnkit::Backend* CreateNothing(uint32_t) { return nullptr; }
const AttnkitPluginV1 kPlugin = {ATTNKIT_PLUGIN_ABI_VERSION + 98, 1, &CreateNothing};
}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnkitPluginV1* attnkit_plugin_entry(void) {
  return &kPlugin;
}

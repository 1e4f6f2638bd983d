/* A plugin, in plain C, built for a plugin ABI newer than this attnkit's:
 * the registry must refuse it naming both versions. */
#include "attnkit/plugin.h"

static int32_t CreateNothing(uint32_t index, void** self, const attnkit_backend_ops** ops,
                             char* err, size_t err_size) {
  (void)index;
  (void)self;
  (void)ops;
  (void)err;
  (void)err_size;
  return ATTNKIT_INTERNAL;
}

static const attnkit_plugin kPlugin = {sizeof(attnkit_plugin), ATTNKIT_PLUGIN_ABI_VERSION + 1,
                                       "from-the-future", 1, &CreateNothing};

__attribute__((visibility("default"))) const attnkit_plugin* attnkit_plugin_entry(void) {
  return &kPlugin;
}

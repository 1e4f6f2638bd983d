// libattnkit_cuda.so: the CUDA backends as a dlopen plugin. Backend 0 is
// "cuda" (flash kernels), backend 1 "cuda-cublas" (the cuBLAS baseline).
// Creating them touches no CUDA API, so the plugin loads on a machine
// without a GPU or driver; Available() then says why they cannot run.
#include "backends/cuda/cublas_backend.h"
#include "backends/cuda/flash_backend.h"
#include "core/plugin_api.h"

namespace {

attnkit::Backend* CreateBackend(uint32_t index) {
  switch (index) {
    case 0:
      return attnkit::cuda::MakeFlashBackend().release();
    case 1:
      return attnkit::cuda::MakeCublasBackend().release();
    default:
      return nullptr;
  }
}

const AttnkitPluginV1 kPlugin = {ATTNKIT_PLUGIN_ABI_VERSION, 2, &CreateBackend};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnkitPluginV1* attnkit_plugin_entry(
    void) {
  return &kPlugin;
}

// libattnkit_cuda.so: the CUDA backends as a dlopen plugin. Backend 0 is
// "cuda" (flash kernels), backend 1 "cuda-cublas" (the cuBLAS baseline).
// Creating them touches no CUDA API, so the plugin loads on a machine
// without a GPU or driver; Available() then says why they cannot run.
#include "attnkit/plugin_sdk.h"
#include "backends/cuda/cublas_backend.h"
#include "backends/cuda/flash_backend.h"
#include "plugin/backend_export.h"

namespace {

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  switch (index) {
    case 0:
      return attnkit::ExportBackend(attnkit::cuda::MakeFlashBackend());
    case 1:
      return attnkit::ExportBackend(attnkit::cuda::MakeCublasBackend());
    default:
      return nullptr;
  }
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("attnkit-cuda", 2, Create)

#include "backends/builtin.h"

#include <cstdlib>

#include "backends/blas/blas_backend.h"
#include "backends/highway/highway_backend.h"
#include "backends/reference/reference_backend.h"
#include "core/backend_export.h"
#include "core/c_backend.h"

namespace attnkit {

std::unique_ptr<Backend> LinkedThroughCAbi(std::unique_ptr<Backend> backend) {
  return AdoptSdkBackend(ExportBackend(std::move(backend)));
}

void RegisterBuiltinBackends(BackendRegistry* registry) {
  // One line per built-in backend; the registry rejects duplicate names.
  registry->Register(LinkedThroughCAbi(MakeHighwayBackend())).IgnoreError();
  registry->Register(LinkedThroughCAbi(MakeBlasBackend())).IgnoreError();
  registry->Register(LinkedThroughCAbi(MakeReferenceBackend())).IgnoreError();
}

const std::vector<std::string>& DefaultAutoOrder() {
  static const std::vector<std::string>* order =
      new std::vector<std::string>{"cuda", "highway", "blas", "reference"};
  return *order;
}

BackendRegistry& GlobalRegistry() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();
    RegisterBuiltinBackends(r);
    if (const char* paths = std::getenv(kPluginPathEnv)) r->LoadPluginList(paths);
    return r;
  }();
  return *registry;
}

}  // namespace attnkit

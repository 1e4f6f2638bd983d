#include "backends/builtin.h"

#include <cstdlib>

#include "backends/blas/blas_backend.h"
#include "backends/highway/highway_backend.h"
#include "backends/reference/reference_backend.h"
#include "plugin/backend_export.h"
#include "plugin/plugin_table_backend.h"

namespace attnkit {

std::unique_ptr<Backend> LinkedThroughCAbi(std::unique_ptr<Backend> backend) {
  return AdoptSdkBackend(ExportBackend(std::move(backend)));
}

std::vector<std::string> BuiltinBackendNames() { return {"highway", "blas", "reference"}; }

std::unique_ptr<Backend> MakeBuiltinBackend(const std::string& name) {
  // One line per built-in backend.
  if (name == "highway") return MakeHighwayBackend();
  if (name == "blas") return MakeBlasBackend();
  if (name == "reference") return MakeReferenceBackend();
  return nullptr;
}

void RegisterBuiltinBackends(BackendRegistry* registry) {
  // The registry rejects duplicate names.
  for (const std::string& name : BuiltinBackendNames()) {
    registry->Register(LinkedThroughCAbi(MakeBuiltinBackend(name))).IgnoreError();
  }
}

const std::vector<std::string>& DefaultAutoOrder() {
  static const std::vector<std::string>* order =
      new std::vector<std::string>{"cuda", "highway", "blas", "onednn", "reference"};
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

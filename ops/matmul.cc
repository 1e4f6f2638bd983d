#include "ops/matmul.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnkit {
namespace {

// Provider name -> provider, and backend name -> provider name. A backend
// missing from the second list gets kDefaultMatmul.
const std::pair<const char*, const MatmulProvider& (*)()> kProviders[] = {
    {"reference", ReferenceMatmul},
    {"highway", HighwayMatmul},
    {"blas", BlasMatmul},
};
const std::pair<const char*, const char*> kBackendMatmul[] = {
    {"reference", "reference"},
    {"reference-plugin", "reference"},
    {"highway", "highway"},
    {"blas", "blas"},
};

}  // namespace

absl::StatusOr<const MatmulProvider*> FindMatmul(absl::string_view name) {
  for (const auto& entry : kProviders) {
    if (name == entry.first) return &entry.second();
  }
  return absl::NotFoundError(absl::StrCat("no matmul provider named '", name,
                                          "'; known: ", absl::StrJoin(MatmulNames(), ", ")));
}

std::vector<std::string> MatmulNames() {
  std::vector<std::string> names;
  for (const auto& entry : kProviders) names.emplace_back(entry.first);
  return names;
}

const MatmulProvider& MatmulForBackend(absl::string_view backend_name) {
  for (const auto& entry : kBackendMatmul) {
    if (backend_name == entry.first) return **FindMatmul(entry.second);
  }
  return **FindMatmul(kDefaultMatmul);
}

}  // namespace attnkit

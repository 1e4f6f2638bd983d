#include "ops/matmul.h"

#include <algorithm>
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

void MatmulProvider::LinearGradInput(const float* dy, int64_t ldy, const float* w, int64_t m,
                                     int64_t n, int64_t k, float* dx, int64_t ldx,
                                     bool accumulate) const {
  for (int64_t r = 0; r < m; ++r) {
    float* out = dx + r * ldx;
    if (!accumulate) std::fill(out, out + k, 0.0f);
    const float* g = dy + r * ldy;
    // dX[r, :] += dY[r, c] * W[c, :]: contiguous rows of W, no transpose.
    for (int64_t c = 0; c < n; ++c) {
      const float a = g[c];
      const float* wc = w + c * k;
      for (int64_t i = 0; i < k; ++i) out[i] += a * wc[i];
    }
  }
}

void MatmulProvider::LinearGradWeight(const float* dy, int64_t ldy, const float* x, int64_t ldx,
                                      int64_t m, int64_t n, int64_t k, float* dw,
                                      float* dbias) const {
  for (int64_t r = 0; r < m; ++r) {
    const float* g = dy + r * ldy;
    const float* xr = x + r * ldx;
    // dW[c, :] += dY[r, c] * X[r, :], one rank-1 update per row of X.
    for (int64_t c = 0; c < n; ++c) {
      const float a = g[c];
      float* wc = dw + c * k;
      for (int64_t i = 0; i < k; ++i) wc[i] += a * xr[i];
      if (dbias != nullptr) dbias[c] += a;
    }
  }
}

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

#include "backends/blas/openblas_engine.h"

#include <cblas.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnkit {
namespace blas {
namespace {

class OpenBlasEngine : public GemmEngine {
 public:
  std::string BackendName() const override { return "blas"; }
  std::string Library() const override {
    return absl::StrFormat("OpenBLAS (%s)", openblas_get_corename());
  }
  std::string KernelTag() const override { return absl::StrCat("sgemm/", openblas_get_corename()); }
  void SetGemmThreads(int n) override { openblas_set_num_threads(n); }
  int GemmThreads() const override { return openblas_get_num_threads(); }

  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
  }
};

}  // namespace

std::shared_ptr<GemmEngine> MakeOpenBlasEngine() { return std::make_shared<OpenBlasEngine>(); }

}  // namespace blas
}  // namespace attnkit

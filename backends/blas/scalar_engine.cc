#include "backends/blas/scalar_engine.h"

#include <atomic>
#include <string>

namespace attnkit {
namespace blas {
namespace {

// c = alpha * sum_x A(i, x) B(x, j) + beta * c, each sum in double (more
// accurate than the f32 sums the contract allows), beta 0 ignoring c.
template <typename LoadA, typename LoadB>
void Loops(int64_t m, int64_t n, int64_t k, float alpha, LoadA a, LoadB b, float beta, float* c,
           int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t x = 0; x < k; ++x) sum += static_cast<double>(a(i, x)) * b(x, j);
      float& out = c[i * ldc + j];
      out = static_cast<float>(alpha * sum) + (beta == 0.0f ? 0.0f : beta * out);
    }
  }
}

class ScalarEngine : public GemmEngine {
 public:
  std::string BackendName() const override { return "blas-scalar"; }
  std::string Library() const override { return "plain loops (tests only)"; }
  std::string KernelTag() const override { return "scalar-gemm"; }
  void SetGemmThreads(int n) override { threads_ = n; }
  int GemmThreads() const override { return threads_; }

  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) override {
    Loops(
        m, n, k, alpha,
        [&](int64_t i, int64_t x) { return trans_a ? a[x * lda + i] : a[i * lda + x]; },
        [&](int64_t x, int64_t j) { return trans_b ? b[j * ldb + x] : b[x * ldb + j]; }, beta, c,
        ldc);
  }

  bool HasInt8Dot() const override { return true; }
  void Int8DotTransB(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                     int64_t ldb, int32_t* c, int64_t ldc) override {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int32_t sum = 0;
        for (int64_t x = 0; x < k; ++x) sum += int32_t{a[i * lda + x]} * b[j * ldb + x];
        c[i * ldc + j] = sum;
      }
    }
  }

  bool HasU8S8Dot() const override { return true; }
  void U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                    const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) override {
    for (int64_t x = 0; x < batch; ++x) {
      const uint8_t* ax = a + x * m * k;
      const int8_t* bx = b + x * stride_b;
      int32_t* cx = c + x * m * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          int32_t sum = 0;
          for (int64_t y = 0; y < k; ++y) sum += int32_t{ax[i * k + y]} * bx[y * ldb + j];
          cx[i * n + j] = sum;
        }
      }
    }
  }

  bool HasGemm16(DType type) const override { return type == DType::kBF16 || type == DType::kF16; }
  void Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc) override {
    auto widen = [type](uint16_t x) {
      return type == DType::kBF16 ? F32FromBF16(x) : F32FromF16(x);
    };
    Loops(
        m, n, k, alpha,
        [&](int64_t i, int64_t x) { return widen(trans_a ? a[x * lda + i] : a[i * lda + x]); },
        [&](int64_t x, int64_t j) { return widen(trans_b ? b[j * ldb + x] : b[x * ldb + j]); },
        beta, c, ldc);
  }

 private:
  std::atomic<int> threads_{1};
};

}  // namespace

std::shared_ptr<GemmEngine> MakeScalarEngine() { return std::make_shared<ScalarEngine>(); }

}  // namespace blas
}  // namespace attnkit

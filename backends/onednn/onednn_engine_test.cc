// OneDnnEngine against a plain triple loop: every transposition, alpha and
// beta, leading dimensions wider than the rows, beta 0 over NaN, the
// primitive cache, concurrent callers, the int8 dot and the batched u8 x s8
// product.
#include "backends/onednn/onednn_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace onednn {
namespace {

std::unique_ptr<OneDnnEngine> NewEngine(EngineOptions options = {}) {
  absl::StatusOr<std::unique_ptr<OneDnnEngine>> e = OneDnnEngine::Create(options);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// c = alpha op(a) op(b) + beta c in double, as the engine's contract says.
void NaiveSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                const std::vector<float>& a, int64_t lda, const std::vector<float>& b, int64_t ldb,
                float beta, std::vector<float>& c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t x = 0; x < k; ++x) {
        const float av = ta ? a[x * lda + i] : a[i * lda + x];
        const float bv = tb ? b[j * ldb + x] : b[x * ldb + j];
        sum += static_cast<double>(av) * bv;
      }
      const double old = beta == 0.0f ? 0.0 : beta * static_cast<double>(c[i * ldc + j]);
      c[i * ldc + j] = static_cast<float>(alpha * sum + old);
    }
  }
}

TEST(OneDnnEngineTest, SgemmMatchesTripleLoopForEveryTransposition) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t m = 13, n = 21, k = 37;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
        for (float& x : a) x = u(rng);
        for (float& x : b) x = u(rng);
        for (float& x : c) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
        std::vector<float> want = c;
        NaiveSgemm(ta, tb, m, n, k, 0.25f, a, lda, b, ldb, beta, want, ldc);
        e->Sgemm(ta, tb, m, n, k, 0.25f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        ASSERT_TRUE(e->TakeError().ok());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], 1e-5)
                << "ta " << ta << " tb " << tb << " beta " << beta << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(OneDnnEngineTest, EmptySumScalesOrClearsC) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  std::vector<float> c = {std::numeric_limits<float>::quiet_NaN(), 2.0f};
  e->Sgemm(false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(c[1], 0.0f);
}

TEST(OneDnnEngineTest, CachesOnePrimitivePerShapeAndEvictsTheLeastRecentlyUsed) {
  EngineOptions options;
  options.max_cached_primitives = 3;
  std::unique_ptr<OneDnnEngine> e = NewEngine(options);
  ASSERT_NE(e, nullptr);
  const CacheStats before = e->Stats();
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64);
  for (int round = 0; round < 3; ++round) {
    e->Sgemm(false, false, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4);
  }
  CacheStats s = e->Stats();
  EXPECT_EQ(s.misses - before.misses, 1);
  EXPECT_EQ(s.hits - before.hits, 2);
  EXPECT_EQ(c[0], 4.0f);
  for (int64_t k = 1; k <= 6; ++k) {  // six new shapes through a cache of three
    e->Sgemm(false, false, 2, 2, k, 1.0f, a.data(), k, b.data(), 2, 0.0f, c.data(), 2);
    EXPECT_EQ(c[0], static_cast<float>(k));
  }
  s = e->Stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_GE(s.evictions, 4);
  EXPECT_GT(s.create_seconds, 0);
}

TEST(OneDnnEngineTest, ThreadsCallAtOnce) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  e->SetGemmThreads(1);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int64_t n = 32 + t;  // shapes of their own and one shared one
      std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
      for (int round = 0; round < 50; ++round) {
        const int64_t size = round % 2 == 0 ? n : 32;
        e->Sgemm(false, true, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f,
                 c.data(), size);
        for (int64_t i = 0; i < size * size; ++i) wrong[t] += c[i] != 0.5f * size;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_TRUE(e->TakeError().ok());
}

TEST(OneDnnEngineTest, Int8DotIsExactOrSaysWhyNot) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  if (!e->HasInt8Dot()) {
    EXPECT_FALSE(e->Int8Note().empty());
    EXPECT_NE(e->Remarks().find("dequantized"), std::string::npos) << e->Remarks();
    GTEST_SKIP() << "no exact int8 GEMM on " << e->Isa() << ": " << e->Int8Note();
  }
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-128, 127);
  // k 125-127 with m past 32: shapes oneDNN 2.6.3's AMX kernels fault on
  // (onednn_engine.cc, AmxSafeK).
  for (const auto [m, k] : {std::pair<int64_t, int64_t>{5, 576}, {65, 125}, {33, 126}, {65, 127}}) {
    const int64_t n = 70, lda = k + 16, ldb = k + 8, ldc = n + 3;
    std::vector<int8_t> a(m * lda), b(n * ldb);
    for (int8_t& x : a) x = static_cast<int8_t>(u(rng) == -128 ? -127 : u(rng));
    for (int64_t j = 0; j < n * ldb; ++j) b[j] = static_cast<int8_t>(j % 7 == 0 ? -128 : u(rng));
    for (int64_t x = 0; x < k; ++x) a[x] = 127, b[x] = 127;  // row 0 . key 0 at the range's end
    std::vector<int32_t> c(m * ldc, -1);
    e->Int8DotTransB(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
    ASSERT_TRUE(e->TakeError().ok());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t want = 0;
        for (int64_t x = 0; x < k; ++x) want += int64_t{a[i * lda + x]} * b[j * ldb + x];
        ASSERT_EQ(c[i * ldc + j], want) << "m " << m << " k " << k << " at " << i << "," << j;
      }
    }
  }
}

// The largest |entry| U8S8DotBatch leaves in c over an empty sum (k = 0),
// which must clear it.
int32_t LargestAfterEmptySum(OneDnnEngine& e) {
  std::vector<int32_t> c(2 * 3 * 5, 7);
  e.U8S8DotBatch(2, 3, 5, 0, nullptr, nullptr, 5, 0, c.data());
  int32_t worst = 0;
  for (int32_t x : c) worst = std::max(worst, x < 0 ? -x : x);
  return worst;
}

TEST(OneDnnEngineTest, U8TimesS8BatchIsExactOrSaysWhyNot) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  if (!e->HasU8S8Dot()) {
    EXPECT_FALSE(e->U8Note().empty());
    EXPECT_NE(e->Remarks().find("V dequantized"), std::string::npos) << e->Remarks();
    GTEST_SKIP() << "no exact u8 x s8 GEMM on " << e->Isa() << ": " << e->U8Note();
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(0, 255), s(-128, 127);
  // Blocks of 64 keys as attention_block.cc multiplies them (V rows ldb
  // apart, the batch entries 64 rows apart), a partial block, and m = 1;
  // k 126 with m 65 (AmxSafeK).
  for (const int64_t k : {64, 23, 126}) {
    for (const int64_t m : {4, 1, 65}) {
      const int64_t batch = 3, n = 72, ldb = 80, stride_b = 128 * ldb;
      std::vector<uint8_t> a(batch * m * k);
      std::vector<int8_t> b(batch * stride_b);
      for (uint8_t& x : a) x = static_cast<uint8_t>(u(rng));
      for (int8_t& x : b) x = static_cast<int8_t>(s(rng));
      for (int64_t y = 0; y < k; ++y) a[y] = 255, b[y * ldb] = -128;  // row 0 . column 0: the ends
      std::vector<int32_t> c(batch * m * n, -1);
      e->U8S8DotBatch(batch, m, n, k, a.data(), b.data(), ldb, stride_b, c.data());
      ASSERT_TRUE(e->TakeError().ok());
      for (int64_t x = 0; x < batch; ++x) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            int64_t want = 0;
            for (int64_t y = 0; y < k; ++y) {
              want += int64_t{a[(x * m + i) * k + y]} * b[x * stride_b + y * ldb + j];
            }
            ASSERT_EQ(c[(x * m + i) * n + j], want)
                << "k " << k << " m " << m << " at " << x << "," << i << "," << j;
          }
        }
      }
    }
  }
  EXPECT_EQ(LargestAfterEmptySum(*e), 0);
}

TEST(OneDnnEngineTest, Bf16GemmSumsExactProductsOrSaysWhyNot) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->HasGemm16(DType::kF16));
  if (!e->HasGemm16(DType::kBF16)) {
    EXPECT_FALSE(e->Bf16Note().empty());
    EXPECT_NE(e->Remarks().find("bf16 K/V widened to f32"), std::string::npos) << e->Remarks();
    GTEST_SKIP() << "no bf16 matmul on " << e->Isa() << ": " << e->Bf16Note();
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  // k 63 with m past 32 (and k 1, 3): shapes oneDNN 2.6.3's AMX kernels
  // fault on, or that AmxSafeK leaves to the loop alone.
  for (const auto [m, k] :
       {std::pair<int64_t, int64_t>{9, 100}, {65, 63}, {33, 63}, {65, 1}, {65, 3}}) {
    const int64_t n = 40;
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (float beta : {0.0f, 1.0f}) {
          const int64_t lda = (ta ? m : k) + 4, ldb = (tb ? k : n) + 6, ldc = n + 1;
          std::vector<uint16_t> a((ta ? k : m) * lda), b((tb ? n : k) * ldb);
          for (uint16_t& x : a) x = BF16FromF32(u(rng));
          for (uint16_t& x : b) x = BF16FromF32(u(rng));
          std::vector<float> c(m * ldc,
                               beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : 0.5f);
          e->Gemm16(DType::kBF16, ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta,
                    c.data(), ldc);
          ASSERT_TRUE(e->TakeError().ok());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double want = 0;
              for (int64_t x = 0; x < k; ++x) {
                want += double{F32FromBF16(ta ? a[x * lda + i] : a[i * lda + x])} *
                        F32FromBF16(tb ? b[j * ldb + x] : b[x * ldb + j]);
              }
              want = 0.5 * want + (beta == 0.0f ? 0.0 : 0.5);
              ASSERT_NEAR(c[i * ldc + j], want, 1e-4) << "m " << m << " k " << k << " ta " << ta
                                                      << " tb " << tb << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(OneDnnEngineTest, NamesTheLibraryAndIsa) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->BackendName(), "onednn");
  EXPECT_NE(e->Library().find("oneDNN "), std::string::npos) << e->Library();
  EXPECT_NE(e->Library().find(e->Isa()), std::string::npos) << e->Library();
  EXPECT_NE(e->Isa(), "unknown");
}

// Blocks of kAmxRows16 stacked rows for bf16 products where oneDNN runs
// them on AMX; elsewhere the backend's default.
TEST(OneDnnEngineTest, PrefersShortBlocksForBf16OnAmx) {
  std::unique_ptr<OneDnnEngine> e = NewEngine();
  ASSERT_NE(e, nullptr);
  const bool amx_bf16 = e->Isa().find("amx") != std::string::npos && e->HasGemm16(DType::kBF16);
  EXPECT_EQ(e->PreferredRows16(), amx_bf16 ? OneDnnEngine::kAmxRows16 : 0) << e->Isa();
}

}  // namespace
}  // namespace onednn
}  // namespace attnkit

// The C API's contract at its edges: every bad input is a status code with a
// message naming what is wrong, never a crash; plugin failures are listed;
// results say what ran. (examples/attention.c covers the happy path from C.)
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

attnkit_tensor Dense(float* data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  attnkit_tensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = ATTNKIT_F32;
  t.rank = 4;
  const int64_t shape[4] = {d0, d1, d2, d3};
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(attnkit_context_create("/nonexistent/libnothing.so", &ctx_, err_, sizeof(err_)),
              ATTNKIT_OK)
        << err_;
    attnkit_problem_init(&p_);
    p_.num_heads = 4;
    p_.num_kv_heads = 2;
    p_.q_len = 3;
    p_.kv_len = 5;
    p_.head_dim = 8;
    std::memset(&args_, 0, sizeof(args_));
    args_.struct_size = sizeof(args_);
    args_.q = Dense(q_, 1, 4, 3, 8);
    args_.k = Dense(k_, 1, 2, 5, 8);
    args_.v = Dense(v_, 1, 2, 5, 8);
    args_.o = Dense(o_, 1, 4, 3, 8);
    for (int i = 0; i < 96; ++i) q_[i] = 0.01f * i;
    for (int i = 0; i < 80; ++i) k_[i] = v_[i] = 0.02f * (i % 7);
  }
  void TearDown() override { attnkit_context_destroy(ctx_); }

  attnkit_context* ctx_ = nullptr;
  char err_[1024] = {0};
  attnkit_problem p_;
  attnkit_args args_;
  float q_[96], k_[80], v_[80], o_[96];
};

TEST_F(CApiTest, ListsBackendsAndPluginFailures) {
  ASSERT_GE(attnkit_num_backends(ctx_), 3);
  attnkit_backend_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(attnkit_backend_info_get(ctx_, 0, &info, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  EXPECT_STREQ(info.name, "highway");
  EXPECT_EQ(info.available, ATTNKIT_OK);
  EXPECT_EQ(info.uses_host_memory, 1);
  EXPECT_NE(info.caps.dtypes & (1u << ATTNKIT_BF16), 0u);
  EXPECT_EQ(attnkit_backend_info_get(ctx_, 99, &info, err_, sizeof(err_)), ATTNKIT_OUT_OF_RANGE);
  EXPECT_THAT(err_, HasSubstr("backend index 99"));
  EXPECT_NE(info.caps.value_head_dim, 0);
  EXPECT_NE(info.caps.kv_dtypes & (1u << ATTNKIT_F8E4M3), 0u);
  info.struct_size = 8;
  EXPECT_EQ(attnkit_backend_info_get(ctx_, 0, &info, err_, sizeof(err_)), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("attnkit_backend_info.struct_size (8)"));
  // A caller built before the 0.29 caps rows: it gets the rows it knows, and
  // nothing past its struct is written.
  attnkit_backend_info older;
  std::memset(&older, 0x5A, sizeof(older));
  const size_t older_size =
      offsetof(attnkit_backend_info, caps) + offsetof(attnkit_caps, value_head_dim);
  older.struct_size = static_cast<uint32_t>(older_size);
  ASSERT_EQ(attnkit_backend_info_get(ctx_, 0, &older, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  EXPECT_EQ(older.caps.struct_size, offsetof(attnkit_caps, value_head_dim));
  EXPECT_NE(older.caps.sinks, 0);
  const auto* tail = reinterpret_cast<const unsigned char*>(&older) + older_size;
  EXPECT_EQ(*tail, 0x5A) << "wrote past the caller's struct";

  ASSERT_EQ(attnkit_num_plugin_failures(ctx_), 1);
  char failure[512];
  ASSERT_EQ(attnkit_plugin_failure(ctx_, 0, failure, sizeof(failure)), ATTNKIT_OK);
  EXPECT_THAT(failure, HasSubstr("/nonexistent/libnothing.so"));
}

TEST_F(CApiTest, RunsAndSaysWhatRan) {
  attnkit_run_result result;
  result.struct_size = sizeof(result);
  ASSERT_EQ(attnkit_run(ctx_, "auto", &p_, &args_, &result, err_, sizeof(err_)), ATTNKIT_OK)
      << err_;
  EXPECT_STREQ(result.backend, "highway");
  EXPECT_THAT(result.kernel, HasSubstr("flash"));
  EXPECT_THAT(result.reason, HasSubstr("auto"));
  float reference[96];
  args_.o.data = reference;
  ASSERT_EQ(attnkit_run(ctx_, "reference", &p_, &args_, nullptr, err_, sizeof(err_)), ATTNKIT_OK);
  for (int i = 0; i < 96; ++i) EXPECT_NEAR(o_[i], reference[i], 1e-5) << i;
  EXPECT_EQ(attnkit_set_num_threads(ctx_, "highway", 1, err_, sizeof(err_)), ATTNKIT_OK);
  EXPECT_EQ(attnkit_set_stream(ctx_, "highway", nullptr, err_, sizeof(err_)),
            ATTNKIT_UNIMPLEMENTED);
  EXPECT_THAT(err_, HasSubstr("runs on the host"));
}

TEST_F(CApiTest, BadInputsAreErrorsThatSayWhy) {
  EXPECT_EQ(attnkit_run(nullptr, "auto", &p_, &args_, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("ctx is NULL"));
  EXPECT_EQ(attnkit_run(ctx_, "auto", nullptr, &args_, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_run(ctx_, "auto", &p_, nullptr, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_run(ctx_, "nope", &p_, &args_, nullptr, err_, sizeof(err_)), ATTNKIT_NOT_FOUND);
  EXPECT_THAT(err_, HasSubstr("unknown backend 'nope'"));
  // A tensor whose shape disagrees with the problem.
  args_.k.shape[2] = 6;
  EXPECT_EQ(attnkit_run(ctx_, "reference", &p_, &args_, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("k"));
  args_.k.shape[2] = 5;
  // An enum value out of range names the field.
  p_.mask = 7;
  EXPECT_EQ(attnkit_problem_validate(&p_, err_, sizeof(err_)), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("mask (7) is not a known value"));
  p_.mask = ATTNKIT_MASK_NONE;
  EXPECT_EQ(attnkit_set_num_threads(ctx_, "highway", 0, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("threads (0) must be >= 1"));
  // Messages are truncated to the buffer, never overrun it.
  char tiny[8];
  std::memset(tiny, 'x', sizeof(tiny));
  EXPECT_EQ(attnkit_run(ctx_, "nope", &p_, &args_, nullptr, tiny, sizeof(tiny)), ATTNKIT_NOT_FOUND);
  EXPECT_EQ(std::strlen(tiny), sizeof(tiny) - 1);
}

// Configs cross as JSON: text -> JSON -> text keeps every field, int64 stay
// numbers, errors give the line and column or the unknown field.
TEST_F(CApiTest, ConfigsConvertBetweenTextAndJson) {
  char* json = nullptr;
  ASSERT_EQ(attnkit_config_from_text("num_heads: 8 num_kv_heads: 2 head_dim: 64 q_len: 16 "
                                     "kv_lengths: [3, 16] batch: 2 mask { kind: CAUSAL }",
                                     &json, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  const std::string j = json;
  attnkit_string_free(json);
  EXPECT_THAT(j, HasSubstr("\"num_heads\":8"));
  EXPECT_THAT(j, HasSubstr("\"kv_lengths\":[3,16]"));
  EXPECT_THAT(j, HasSubstr("\"scale\":null"));
  char* text = nullptr;
  ASSERT_EQ(attnkit_config_to_text(j.c_str(), &text, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  EXPECT_THAT(std::string(text), HasSubstr("kind: CAUSAL"));
  attnkit_string_free(text);
  char* id = nullptr;
  ASSERT_EQ(attnkit_config_validate(j.c_str(), &id, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  EXPECT_THAT(std::string(id), HasSubstr("gqa_h8_g2_q16_k16_d64_b2_causal"));
  attnkit_string_free(id);

  EXPECT_EQ(
      attnkit_config_from_text("num_heads: 8\nmask { kind: CAUSL }", &json, err_, sizeof(err_)),
      ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("line 2"));
  EXPECT_EQ(json, nullptr);
  EXPECT_EQ(attnkit_config_to_text("{\"num_haeds\": 1}", &text, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("num_haeds"));
  EXPECT_EQ(attnkit_config_validate("{\"num_heads\": 8, \"head_dim\": 0, \"q_len\": 4}", nullptr,
                                    err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("head_dim"));
}

TEST_F(CApiTest, CheckReportsEveryBackendAgainstTheReference) {
  char* report = nullptr;
  ASSERT_EQ(attnkit_check(ctx_,
                          "{\"num_heads\": 4, \"num_kv_heads\": 2, \"head_dim\": 32, "
                          "\"q_len\": 9, \"kv_len\": 17, \"mask\": {\"kind\": \"CAUSAL\"}, "
                          "\"alignment\": \"BOTTOM_RIGHT\"}",
                          "highway,reference", &report, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  const std::string r = report;
  attnkit_string_free(report);
  EXPECT_THAT(r, HasSubstr("\"backend\": \"highway\""));
  EXPECT_THAT(r, HasSubstr("\"backend\": \"reference\""));
  EXPECT_THAT(r, HasSubstr("\"status\": \"pass\""));
  EXPECT_THAT(r, Not(HasSubstr("\"backend\": \"blas\"")));
  EXPECT_EQ(attnkit_check(ctx_, "{\"num_heads\": 4, \"head_dim\": 32, \"q_len\": 9}", "nope",
                          &report, err_, sizeof(err_)),
            ATTNKIT_NOT_FOUND);
  EXPECT_THAT(err_, HasSubstr("nope"));
  EXPECT_EQ(attnkit_check(ctx_, nullptr, nullptr, &report, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_compare(ctx_, "[]", nullptr, nullptr, 1, 0, &report, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("empty"));
  EXPECT_EQ(
      attnkit_compare(ctx_, nullptr, "no_such_suite", nullptr, 1, 0, &report, err_, sizeof(err_)),
      ATTNKIT_NOT_FOUND);
}

// The layer: a KV-cached decode gives what a full forward over the same
// tokens gives; weights round-trip; bad shapes are refused by name.
TEST_F(CApiTest, LayerDecodesWithItsCacheAsAFullForward) {
  attnkit_layer* layer = nullptr;
  ASSERT_EQ(attnkit_layer_create(ctx_,
                                 "{\"num_heads\": 4, \"num_kv_heads\": 2, \"head_dim\": 8, "
                                 "\"mask\": {\"kind\": \"CAUSAL\"}, \"backend\": \"highway\"}",
                                 1, 5, &layer, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  constexpr int T = 5, D = 32;
  std::vector<float> x(T * D), full(T * D), step(D), decoded(T * D);
  for (int i = 0; i < T * D; ++i) x[i] = static_cast<float>((i * 37) % 19) / 19.0f - 0.5f;
  auto view = [](float* data, int64_t t) {
    attnkit_tensor v;
    std::memset(&v, 0, sizeof(v));
    v.data = data;
    v.dtype = ATTNKIT_F32;
    v.rank = 3;
    v.shape[0] = 1, v.shape[1] = t, v.shape[2] = D;
    v.strides[0] = t * D, v.strides[1] = D, v.strides[2] = 1;
    return v;
  };
  attnkit_tensor xv = view(x.data(), T), fv = view(full.data(), T);
  attnkit_run_result result;
  result.struct_size = sizeof(result);
  ASSERT_EQ(attnkit_layer_forward(layer, &xv, nullptr, &fv, &result, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  EXPECT_STREQ(result.backend, "highway");
  attnkit_kv_cache* cache = nullptr;
  ASSERT_EQ(attnkit_kv_cache_create(layer, 1, 8, ATTNKIT_F32, &cache, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  for (int t = 0; t < T; ++t) {
    attnkit_tensor xt = view(x.data() + t * D, 1), yt = view(decoded.data() + t * D, 1);
    ASSERT_EQ(attnkit_layer_forward_cached(layer, &xt, cache, &yt, nullptr, err_, sizeof(err_)),
              ATTNKIT_OK)
        << err_;
  }
  for (int i = 0; i < T * D; ++i) EXPECT_NEAR(decoded[i], full[i], 1e-5) << i;
  int64_t batch = 0, capacity = 0, bytes = 0, length = 0;
  ASSERT_EQ(attnkit_kv_cache_info(cache, &batch, &capacity, &bytes, &length, 1, err_, sizeof(err_)),
            ATTNKIT_OK);
  EXPECT_EQ(batch, 1);
  EXPECT_EQ(capacity, 8);
  EXPECT_EQ(length, T);
  EXPECT_EQ(bytes, 2 * 1 * 2 * 8 * 8 * 4);
  const int64_t rollback = 2;
  ASSERT_EQ(attnkit_kv_cache_set_lengths(cache, &rollback, 1, err_, sizeof(err_)), ATTNKIT_OK);
  const int64_t too_long = 9;
  EXPECT_EQ(attnkit_kv_cache_set_lengths(cache, &too_long, 1, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);

  std::vector<float> wq(D * D);
  attnkit_tensor w;
  std::memset(&w, 0, sizeof(w));
  w.data = wq.data();
  w.dtype = ATTNKIT_F32;
  w.rank = 2;
  w.shape[0] = D, w.shape[1] = D, w.strides[0] = D, w.strides[1] = 1;
  ASSERT_EQ(attnkit_layer_get_weight(layer, "wq", &w, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  ASSERT_EQ(attnkit_layer_set_weight(layer, "wq", &w, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  EXPECT_EQ(attnkit_layer_get_weight(layer, "wz", &w, err_, sizeof(err_)), ATTNKIT_NOT_FOUND);
  w.shape[0] = 3;
  EXPECT_EQ(attnkit_layer_set_weight(layer, "wq", &w, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("wq has shape [3, 32]"));
  attnkit_tensor bad = view(x.data(), T);
  bad.shape[2] = 7;
  EXPECT_EQ(attnkit_layer_forward(layer, &bad, nullptr, &fv, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("model_dim"));
  attnkit_kv_cache_destroy(cache);
  attnkit_layer_destroy(layer);
}

// Paged and int8 caches through the C API: a paged cache decodes the dense
// cache's outputs bit for bit (reference backend), a fork shares the
// prompt, int8 storage is accepted, and a pool too small is
// RESOURCE_EXHAUSTED with the cache unchanged.
TEST_F(CApiTest, PagedAndInt8CachesDecodeLikeTheDenseCache) {
  attnkit_layer* layer = nullptr;
  ASSERT_EQ(attnkit_layer_create(ctx_,
                                 "{\"num_heads\": 4, \"num_kv_heads\": 2, \"head_dim\": 8, "
                                 "\"mask\": {\"kind\": \"CAUSAL\"}, \"backend\": \"reference\"}",
                                 0, 6, &layer, err_, sizeof(err_)),
            ATTNKIT_OK)
      << err_;
  constexpr int B = 2, T = 20, D = 32;
  std::vector<float> x(B * T * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 29) % 23) / 23.0f - 0.5f;
  // Tokens [t, t + n) of both sequences of x [B, T, D], or of y [B, n, D].
  auto view = [](float* data, int64_t n, int64_t seq_stride) {
    attnkit_tensor v;
    std::memset(&v, 0, sizeof(v));
    v.data = data;
    v.dtype = ATTNKIT_F32;
    v.rank = 3;
    v.shape[0] = B, v.shape[1] = n, v.shape[2] = D;
    v.strides[0] = seq_stride, v.strides[1] = D, v.strides[2] = 1;
    return v;
  };
  // y of every step (a 7-token prefill, then one token at a time).
  auto decode = [&](attnkit_kv_cache* cache) {
    std::vector<float> y(B * T * D);
    for (int t = 0; t < T;) {
      const int n = t == 0 ? 7 : 1;
      attnkit_tensor xt = view(x.data() + t * D, n, T * D),
                     yt = view(y.data() + t * B * D, n, n * D);
      EXPECT_EQ(attnkit_layer_forward_cached(layer, &xt, cache, &yt, nullptr, err_, sizeof(err_)),
                ATTNKIT_OK)
          << err_;
      t += n;
    }
    return y;
  };
  for (int32_t dtype : {ATTNKIT_F32, ATTNKIT_I8}) {
    attnkit_kv_cache *dense = nullptr, *paged = nullptr;
    ASSERT_EQ(attnkit_kv_cache_create(layer, B, T, dtype, &dense, err_, sizeof(err_)), ATTNKIT_OK)
        << err_;
    ASSERT_EQ(attnkit_kv_cache_create_paged(layer, B, 16, 4, dtype, &paged, err_, sizeof(err_)),
              ATTNKIT_OK)
        << err_;
    EXPECT_EQ(decode(dense), decode(paged)) << "dtype " << dtype;
    int64_t capacity = 0, bytes = 0;
    ASSERT_EQ(
        attnkit_kv_cache_info(paged, nullptr, &capacity, &bytes, nullptr, 0, err_, sizeof(err_)),
        ATTNKIT_OK);
    EXPECT_EQ(capacity, 4 * 16);
    EXPECT_EQ(bytes, dtype == ATTNKIT_F32 ? 2 * 4 * 16 * 2 * 8 * 4 : 2 * 4 * 16 * 2 * (8 + 4));
    // Sequence 1 takes sequence 0's first 18 tokens; a shorter paged cache
    // cannot grow back.
    ASSERT_EQ(attnkit_kv_cache_fork(paged, 0, 1, 18, err_, sizeof(err_)), ATTNKIT_OK) << err_;
    int64_t lengths[2] = {0, 0};
    ASSERT_EQ(
        attnkit_kv_cache_info(paged, nullptr, nullptr, nullptr, lengths, 2, err_, sizeof(err_)),
        ATTNKIT_OK);
    EXPECT_EQ(lengths[1], 18);
    const int64_t longer[2] = {20, 19};
    EXPECT_EQ(attnkit_kv_cache_set_lengths(paged, longer, 2, err_, sizeof(err_)),
              ATTNKIT_INVALID_ARGUMENT);
    EXPECT_THAT(err_, HasSubstr("grows only by Append or Fork"));
    EXPECT_EQ(attnkit_kv_cache_fork(paged, 0, 0, 1, err_, sizeof(err_)), ATTNKIT_INVALID_ARGUMENT);
    attnkit_kv_cache_destroy(dense);
    attnkit_kv_cache_destroy(paged);
  }
  // Two pages for two sequences of 20 tokens: the prefill needs 4.
  attnkit_kv_cache* small = nullptr;
  ASSERT_EQ(attnkit_kv_cache_create_paged(layer, B, 16, 2, ATTNKIT_F32, &small, err_, sizeof(err_)),
            ATTNKIT_OK);
  std::vector<float> y(B * T * D);
  attnkit_tensor xt = view(x.data(), T, T * D), yt = view(y.data(), T, T * D);
  EXPECT_EQ(attnkit_layer_forward_cached(layer, &xt, small, &yt, nullptr, err_, sizeof(err_)),
            ATTNKIT_RESOURCE_EXHAUSTED);
  EXPECT_THAT(err_, HasSubstr("needs 4 new pages of 16 tokens, 2 of 2 are free"));
  attnkit_kv_cache_destroy(small);
  attnkit_kv_cache* none = nullptr;
  EXPECT_EQ(attnkit_kv_cache_create_paged(layer, B, 20, 2, ATTNKIT_F32, &none, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("page_size (20) must be a power of two"));
  EXPECT_EQ(attnkit_kv_cache_create(layer, B, T, ATTNKIT_I32, &none, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_THAT(err_, HasSubstr("ATTNKIT_I8"));
  attnkit_layer_destroy(layer);
}

}  // namespace

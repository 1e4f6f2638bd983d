// The C API's contract at its edges: every bad input is a status code with a
// message naming what is wrong, never a crash; plugin failures are listed;
// results say what ran. (examples/attention.c covers the happy path from C.)
#include <cstring>
#include <string>

#include "capi/attnkit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

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
  info.struct_size = 8;
  EXPECT_EQ(attnkit_backend_info_get(ctx_, 0, &info, err_, sizeof(err_)), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("attnkit_backend_info.struct_size (8)"));

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

}  // namespace

// `attnkit generate` with paged and int8 KV caches: a paged stack decodes
// the dense stack's tokens, bit for bit on the reference (the reports'
// hidden-state digests); every backend that runs paged K/V passes the
// recompute check; bad page flags and a pool too small are clear errors.
#include <sstream>
#include <string>

#include "backends/builtin.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/config_io.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// The string value of "key" in a JSON report ("" when absent).
std::string JsonString(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return "";
  const size_t open = json.find('"', json.find(':', at) + 1);
  return json.substr(open + 1, json.find('"', open + 1) - open - 1);
}

class GeneratePagedTest : public ::testing::Test {
 protected:
  // Runs generate on `config_text` with the JSON report on stdout; returns
  // the status, the report in *json.
  absl::Status Generate(const std::string& config_text, const std::string& backend,
                        const GenerateOptions& gen, std::string* json) {
    const std::string path = ::testing::TempDir() + "/generate_paged.textproto";
    EXPECT_TRUE(WriteFileAtomically(path, config_text).ok());
    CliOptions options;
    options.config = path;
    options.backend = backend;
    options.layers = 2;
    options.json = "-";
    std::ostringstream out;
    const absl::Status s = GenerateCommand(GlobalRegistry(), options, gen, out);
    *json = out.str();
    return s;
  }
  // 2 sequences, a 21-token prompt in chunks of 7 (one crosses a page), 14
  // decode steps: 35 tokens, three pages of 16 each.
  static GenerateOptions Options(bool paged) {
    GenerateOptions gen;
    gen.prompt_len = 21;
    gen.new_tokens = 14;
    gen.chunk = 7;
    gen.paged = paged;
    gen.page_size = paged ? 16 : 0;
    return gen;
  }
};

constexpr char kConfig[] = "num_heads: 4 num_kv_heads: 2 head_dim: 8 batch: 2 seed: 5";

TEST_F(GeneratePagedTest, PagedMatchesDenseTokenForToken) {
  for (const char* kv : {"", " kv_dtype: INT8"}) {
    const std::string config = std::string(kConfig) + kv;
    std::string dense, paged;
    ASSERT_TRUE(Generate(config, "reference", Options(false), &dense).ok()) << dense;
    ASSERT_TRUE(Generate(config, "reference", Options(true), &paged).ok()) << paged;
    EXPECT_THAT(paged, HasSubstr("\"kv_cache_paged\": true"));
    EXPECT_THAT(paged, HasSubstr("\"num_pages\": 6"));
    EXPECT_THAT(paged, HasSubstr("\"pages_in_use\": 6"));
    EXPECT_THAT(dense, HasSubstr("\"kv_cache_paged\": false"));
    EXPECT_THAT(paged, HasSubstr("\"ok\": true"));
    EXPECT_EQ(JsonString(paged, "kv_cache_dtype"), *kv ? "i8" : "f32");
    const std::string digest = JsonString(dense, "hidden_digest");
    EXPECT_EQ(digest.size(), 16u) << dense;
    EXPECT_EQ(JsonString(paged, "hidden_digest"), digest) << "kv_dtype" << kv;
  }
}

// Every backend that claims paged K/V decodes a paged stack that passes the
// recompute check (int8 and fp8 too where it claims them).
TEST_F(GeneratePagedTest, EveryPagedBackendVerifies) {
  for (Backend* b : GlobalRegistry().All()) {
    for (const char* kv : {"", " kv_dtype: INT8", " kv_dtype: FP8_E4M3", " kv_dtype: FP8_E5M2"}) {
      const std::string config = std::string(kConfig) + kv + " page_size: 16";
      AttentionConfig step = *ParseConfigText(config, "step");
      step.set_q_len(1);
      step.set_kv_len(35);
      step.set_layout(BTHD);
      step.mutable_mask()->set_kind(MaskSpec::CAUSAL);
      step.set_alignment(BOTTOM_RIGHT);
      auto p = ProblemFromConfig(step);
      ASSERT_TRUE(p.ok()) << p.status();
      if (!b->Supports(*p).ok()) continue;
      std::string json;
      const absl::Status s = Generate(config, b->Name(), Options(false), &json);
      EXPECT_TRUE(s.ok()) << b->Name() << kv << ": " << s << json;
      EXPECT_THAT(json, HasSubstr("\"kv_cache_paged\": true")) << "the config's page_size";
    }
  }
}

TEST_F(GeneratePagedTest, BadPagesAreClearErrors) {
  std::string json;
  GenerateOptions gen = Options(false);
  gen.page_size = 32;
  EXPECT_THAT(std::string(Generate(kConfig, "reference", gen, &json).message()),
              HasSubstr("--page_size (32) sets the page of a paged KV cache: add --paged"));
  gen = Options(true);
  gen.page_size = 24;
  EXPECT_THAT(std::string(Generate(kConfig, "reference", gen, &json).message()),
              HasSubstr("--page_size (24) must be a power of two in [16, 256]"));
  const absl::Status s =
      Generate(std::string(kConfig) + " num_pages: 4", "reference", Options(true), &json);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("KV cache out of pages"));
  EXPECT_THAT(std::string(Generate(std::string(kConfig) + " num_pages: 4", "reference",
                                   Options(false), &json)
                              .message()),
              HasSubstr("num_pages (4) sizes a paged KV cache"));
}

}  // namespace
}  // namespace attnkit

#include "io/proto_json.h"

#include <cmath>
#include <limits>

#include "core/config.pb.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(ProtoJsonTest, PrintsEveryFieldWithInt64AsNumbers) {
  AttentionConfig c;
  c.set_name("decode \"B1\"\n");
  c.set_num_heads(32);
  c.set_kv_len(int64_t{1} << 40);
  c.add_kv_lengths(7);
  c.add_kv_lengths(9);
  c.mutable_mask()->set_kind(MaskSpec::CAUSAL);
  c.set_seed(18446744073709551615ull);
  const std::string json = ProtoToJson(c, 0);
  EXPECT_NE(json.find("\"num_heads\":32"), std::string::npos) << json;
  EXPECT_NE(json.find("\"kv_len\":1099511627776"), std::string::npos) << json;
  EXPECT_NE(json.find("\"kv_lengths\":[7,9]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"seed\":18446744073709551615"), std::string::npos) << json;
  EXPECT_NE(json.find("\"kind\":\"CAUSAL\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\":\"decode \\\"B1\\\"\\n\""), std::string::npos) << json;
  // Defaults are printed; the unset optional scale is null.
  EXPECT_NE(json.find("\"head_dim\":0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"return_lse\":false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"scale\":null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"dtype\":\"DTYPE_UNSPECIFIED\""), std::string::npos) << json;
}

TEST(ProtoJsonTest, RoundTripsThroughProtobufsParser) {
  AttentionConfig c;
  c.set_num_heads(8);
  c.set_scale(0.1f);
  c.set_softcap(30.5f);
  c.set_memory_budget_bytes(int64_t{3} << 33);
  c.add_kv_lengths(5);
  c.set_dtype(BF16);
  for (int indent : {0, 2}) {
    AttentionConfig back;
    ASSERT_TRUE(ProtoFromJson(ProtoToJson(c, indent), "test", &back).ok());
    // Equal as JSON: an unset message field prints as its defaults, and
    // reads back as a present, empty one (the same in proto3).
    EXPECT_EQ(ProtoToJson(back), ProtoToJson(c));
    EXPECT_EQ(back.memory_budget_bytes(), c.memory_budget_bytes());
    EXPECT_EQ(back.scale(), 0.1f);
    EXPECT_TRUE(back.has_scale());
  }
  EXPECT_NE(ProtoToJson(c, 0).find("\"scale\":0.1,"), std::string::npos) << ProtoToJson(c, 0);
}

TEST(ProtoJsonTest, NonFiniteFloatsUseProto3Strings) {
  AttentionConfig c;
  c.set_softcap(std::numeric_limits<float>::infinity());
  c.set_scale(std::nanf(""));
  const std::string json = ProtoToJson(c, 0);
  EXPECT_NE(json.find("\"softcap\":\"Infinity\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"scale\":\"NaN\""), std::string::npos) << json;
  AttentionConfig back;
  ASSERT_TRUE(ProtoFromJson(json, "test", &back).ok());
  EXPECT_TRUE(std::isinf(back.softcap()));
  EXPECT_TRUE(std::isnan(back.scale()));
}

TEST(ProtoJsonTest, UnknownFieldsAreRefusedNamingTheSource) {
  AttentionConfig c;
  const absl::Status s = ProtoFromJson("{\"num_haeds\": 4}", "my.json", &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("my.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("num_haeds"), std::string::npos) << s.message();
  EXPECT_TRUE(ProtoFromJson("{\"num_haeds\": 4}", "my.json", &c, /*ignore_unknown=*/true).ok());
}

}  // namespace
}  // namespace attnkit

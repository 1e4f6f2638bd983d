#include "io/json_writer.h"

#include <limits>

#include "gtest/gtest.h"
#include "platform/version.h"

namespace attnkit {
namespace {

TEST(JsonWriterTest, NestsWithCommasIndentationAndEscapes) {
  JsonWriter w;
  w.BeginObject();
  w.Field("name", "a \"quoted\"\nname").Field("n", int64_t{1} << 40).Field("ok", true);
  w.Key("list").BeginArray().Int(1).Double(0.1).Double(std::numeric_limits<double>::infinity());
  w.EndArray();
  w.Key("empty").BeginObject().EndObject();
  w.Key("none").Null();
  w.Key("raw").Raw("{\n  \"x\": 1\n}\n");
  w.EndObject();
  EXPECT_EQ(w.str(),
            "{\n"
            "  \"name\": \"a \\\"quoted\\\"\\nname\",\n"
            "  \"n\": 1099511627776,\n"
            "  \"ok\": true,\n"
            "  \"list\": [\n"
            "    1,\n"
            "    0.1,\n"
            "    \"Infinity\"\n"
            "  ],\n"
            "  \"empty\": {},\n"
            "  \"none\": null,\n"
            "  \"raw\": {\n"
            "    \"x\": 1\n"
            "  }\n"
            "}\n");
}

TEST(JsonWriterTest, BuildInfoNamesVersionAndCommit) {
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.EndObject();
  EXPECT_NE(w.str().find(std::string("\"version\": \"") + AttnkitVersion()), std::string::npos);
  EXPECT_NE(w.str().find("\"commit\": \""), std::string::npos);
  EXPECT_FALSE(std::string(AttnkitCommit()).empty());
}

}  // namespace
}  // namespace attnkit

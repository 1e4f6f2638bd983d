#include "tools/cli/bare_json_flag.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

// The arguments after rewriting, as strings (argv[0] left out).
std::vector<std::string> Expand(std::vector<std::string> words) {
  std::vector<char*> args = {const_cast<char*>("attnkit")};
  for (std::string& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  ExpandBareJsonFlag(&args, [](const std::string& s) { return s == "check" || s == "compare"; });
  std::vector<std::string> out;
  for (size_t i = 1; i + 1 < args.size(); ++i) out.push_back(args[i]);
  return out;
}

using Words = std::vector<std::string>;

TEST(BareJsonFlag, AtTheEndMeansStandardOutput) {
  EXPECT_EQ(Expand({"check", "--json"}), (Words{"check", "--json=-"}));
  EXPECT_EQ(Expand({"check", "-json"}), (Words{"check", "--json=-"}));
}

TEST(BareJsonFlag, BeforeAFlagOrACommandMeansStandardOutput) {
  EXPECT_EQ(Expand({"check", "--json", "--threads=2"}),
            (Words{"check", "--json=-", "--threads=2"}));
  EXPECT_EQ(Expand({"--json", "compare"}), (Words{"--json=-", "compare"}));
}

TEST(BareJsonFlag, AFileAfterItIsItsValue) {
  EXPECT_EQ(Expand({"check", "--json", "out.json"}), (Words{"check", "--json", "out.json"}));
  EXPECT_EQ(Expand({"check", "--json=r.json"}), (Words{"check", "--json=r.json"}));
  EXPECT_EQ(Expand({"check", "--json=-"}), (Words{"check", "--json=-"}));
}

TEST(BareJsonFlag, NothingAfterADoubleDashIsTouched) {
  EXPECT_EQ(Expand({"run", "--", "--json"}), (Words{"run", "--", "--json"}));
}

}  // namespace
}  // namespace attnkit

#include "tools/cli/config_flags.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "core/config.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/cli/config_flags_test.pb.h"

namespace attnkit {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ConfigFlag Flag(const std::string& path, const std::string& value) {
  return ConfigFlag{path, value, true};
}
ConfigFlag Bare(const std::string& path) { return ConfigFlag{path, "", false}; }

// The config after `flags`, applied over `config`.
AttentionConfig Apply(std::vector<ConfigFlag> flags, AttentionConfig config = {}) {
  const absl::Status s = ApplyConfigFlags(flags, "check", &config);
  EXPECT_TRUE(s.ok()) << s;
  return config;
}

// The message of the InvalidArgument error `flag` gives.
std::string Error(const ConfigFlag& flag) {
  AttentionConfig config;
  const absl::Status s = ApplyConfigFlags({flag}, "check", &config);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << flag.Text() << ": " << s;
  return std::string(s.message());
}

TEST(SplitConfigFlags, TakesConfigFlagsOutBeforeTheEndOfFlags) {
  std::vector<std::string> args = {"attnkit",
                                   "check",
                                   "--config=a.textproto",
                                   "--config.num_heads=4",
                                   "-config.mask.kind=causal",
                                   "--json=-",
                                   "--config.return_lse",
                                   "--config.name=a=b",
                                   "--",
                                   "--config.q_len=3"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const SplitArgs split = SplitConfigFlags(static_cast<int>(argv.size()), argv.data());
  ASSERT_EQ(split.config_flags.size(), 4u);
  EXPECT_EQ(split.config_flags[0].Text(), "--config.num_heads=4");
  EXPECT_EQ(split.config_flags[1].path, "mask.kind");
  EXPECT_EQ(split.config_flags[1].value, "causal");
  EXPECT_FALSE(split.config_flags[2].has_value);
  EXPECT_EQ(split.config_flags[2].Text(), "--config.return_lse");
  EXPECT_EQ(split.config_flags[3].value, "a=b");
  std::vector<std::string> rest(split.rest.begin(), split.rest.end() - 1);
  EXPECT_THAT(rest, ElementsAre("attnkit", "check", "--config=a.textproto", "--json=-", "--",
                                "--config.q_len=3"));
  EXPECT_EQ(split.rest_argc(), 6);
  EXPECT_EQ(split.rest.back(), nullptr);
}

TEST(ApplyConfigFlags, Scalars) {
  const AttentionConfig c =
      Apply({Flag("num_heads", "32"), Flag("head_dim", "128"), Flag("scale", "0.125"),
             Flag("name", "decode, long"), Flag("seed", "18446744073709551615"),
             Flag("nonfinite_inputs", "-3"), Flag("softcap", " 30 ")});
  EXPECT_EQ(c.num_heads(), 32);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_TRUE(c.has_scale());
  EXPECT_EQ(c.scale(), 0.125f);
  EXPECT_EQ(c.name(), "decode, long");
  EXPECT_EQ(c.seed(), 18446744073709551615u);
  EXPECT_EQ(c.nonfinite_inputs(), -3);
  EXPECT_EQ(c.softcap(), 30.0f);
}

TEST(ApplyConfigFlags, OverridesInCommandLineOrderAndKeepsTheRest) {
  AttentionConfig file;
  file.set_name("from the file");
  file.set_num_heads(16);
  file.set_q_len(512);
  file.mutable_mask()->set_kind(MaskSpec::CAUSAL);
  const AttentionConfig c =
      Apply({Flag("num_heads", "4"), Flag("q_len", "1"), Flag("num_heads", "8")}, file);
  EXPECT_EQ(c.num_heads(), 8);
  EXPECT_EQ(c.q_len(), 1);
  EXPECT_EQ(c.name(), "from the file");
  EXPECT_EQ(c.mask().kind(), MaskSpec::CAUSAL);
}

TEST(ApplyConfigFlags, NestedFieldsByDottedPath) {
  const AttentionConfig c =
      Apply({Flag("mask.kind", "SLIDING_WINDOW"), Flag("mask.window_left", "128"),
             Flag("mask.window_right", "0")});
  EXPECT_EQ(c.mask().kind(), MaskSpec::SLIDING_WINDOW);
  EXPECT_EQ(c.mask().window_left(), 128);
  EXPECT_EQ(c.mask().window_right(), 0);
}

TEST(ApplyConfigFlags, RepeatedFieldsTakeACommaSeparatedListThatReplacesThem) {
  AttentionConfig file;
  file.add_kv_lengths(1);
  file.add_kv_lengths(2);
  file.add_kv_lengths(3);
  EXPECT_THAT(Apply({Flag("kv_lengths", "100,200")}, file).kv_lengths(), ElementsAre(100, 200));
  EXPECT_THAT(Apply({Flag("kv_lengths", " 5 , 6 ")}).kv_lengths(), ElementsAre(5, 6));
  EXPECT_THAT(Apply({Flag("kv_lengths", "")}, file).kv_lengths(), ElementsAre());
}

TEST(ApplyConfigFlags, EnumsByNameInAnyCase) {
  const AttentionConfig c = Apply({Flag("dtype", "bf16"), Flag("kv_dtype", "INT8"),
                                   Flag("mask.kind", "causal"), Flag("alignment", "Bottom_Right")});
  EXPECT_EQ(c.dtype(), BF16);
  EXPECT_EQ(c.kv_dtype(), INT8);
  EXPECT_EQ(c.mask().kind(), MaskSpec::CAUSAL);
  EXPECT_EQ(c.alignment(), BOTTOM_RIGHT);
}

TEST(ApplyConfigFlags, Bools) {
  EXPECT_TRUE(Apply({Bare("return_lse")}).return_lse());
  AttentionConfig on;
  on.set_return_lse(true);
  EXPECT_FALSE(Apply({Flag("return_lse", "false")}, on).return_lse());
  EXPECT_FALSE(Apply({Flag("return_lse", "0")}, on).return_lse());
  EXPECT_TRUE(Apply({Flag("return_lse", "1")}).return_lse());
  EXPECT_TRUE(Apply({Flag("return_lse", "TRUE")}).return_lse());
}

TEST(ApplyConfigFlags, AnEmptyValueClearsAFieldOrAMessage) {
  AttentionConfig file;
  file.set_scale(0.5f);
  file.set_num_heads(4);
  file.mutable_mask()->set_kind(MaskSpec::CAUSAL);
  const AttentionConfig c =
      Apply({Flag("scale", ""), Flag("num_heads", ""), Flag("mask", "")}, file);
  EXPECT_FALSE(c.has_scale());
  EXPECT_EQ(c.num_heads(), 0);
  EXPECT_FALSE(c.has_mask());
}

TEST(ApplyConfigFlags, ErrorsNameTheFlagTheValueAndTheRule) {
  std::string e = Error(Flag("heads", "4"));
  EXPECT_THAT(e, HasSubstr("--config.heads=4: attnkit.AttentionConfig has no field 'heads'"));
  EXPECT_THAT(e, HasSubstr("did you mean --config.num_heads, --config.num_kv_heads?"));
  EXPECT_THAT(e, HasSubstr("(attnkit help check lists every --config.* flag)"));
  EXPECT_THAT(Error(Flag("mask.knd", "CAUSAL")),
              HasSubstr("attnkit.MaskSpec (--config.mask) has no field 'knd'; did you mean "
                        "--config.mask.kind?"));
  EXPECT_THAT(Error(Flag("zzzzzz", "1")), ::testing::Not(HasSubstr("did you mean")));

  EXPECT_EQ(Error(Flag("num_heads", "4x")),
            "--config.num_heads=4x: 4x is not a decimal integer (num_heads is int64)");
  EXPECT_EQ(Error(Flag("nonfinite_inputs", "99999999999")),
            "--config.nonfinite_inputs=99999999999: 99999999999 is out of range "
            "[-2147483648, 2147483647] (nonfinite_inputs is int32)");
  EXPECT_THAT(Error(Flag("seed", "-1")), HasSubstr("-1 is out of range [0, 18446744073709551615]"));
  EXPECT_EQ(Error(Flag("softcap", "big")),
            "--config.softcap=big: big is not a number (softcap is float)");
  EXPECT_EQ(Error(Flag("mask.kind", "causl")),
            "--config.mask.kind=causl: causl is not a value of attnkit.MaskSpec.Kind; use one of "
            "KIND_UNSPECIFIED, NONE, CAUSAL, SLIDING_WINDOW (any case)");
  EXPECT_THAT(Error(Flag("return_lse", "yes")),
              HasSubstr("--config.return_lse=yes: yes is not a bool: use true, false, 1 or 0"));
  EXPECT_EQ(Error(Flag("kv_lengths", "100,x")),
            "--config.kv_lengths=100,x: element 2: x is not a decimal integer (kv_lengths is a "
            "comma-separated list of int64)");
  EXPECT_EQ(Error(Flag("mask", "CAUSAL")),
            "--config.mask=CAUSAL: mask is a message (attnkit.MaskSpec), which takes no value; "
            "set its fields (--config.mask.kind, --config.mask.window_left, "
            "--config.mask.window_right), or clear it with --config.mask=");
  EXPECT_THAT(Error(Bare("mask")), HasSubstr("mask is a message"));
  EXPECT_EQ(Error(Bare("num_heads")), "--config.num_heads needs a value: --config.num_heads=INT64");
  EXPECT_EQ(Error(Flag("num_heads.x", "1")),
            "--config.num_heads.x=1: num_heads is int64, not a message, so it has no field 'x'");
}

TEST(ApplyConfigFlags, AllOrNothing) {
  AttentionConfig c;
  c.set_num_heads(4);
  EXPECT_FALSE(ApplyConfigFlags({Flag("num_heads", "8"), Flag("head_dim", "x")}, "", &c).ok());
  EXPECT_EQ(c.num_heads(), 4);
}

TEST(ApplyConfigFlags, EveryKindOfField) {
  config_flags_test::AllKinds m;
  ASSERT_TRUE(
      ApplyConfigFlags(
          {Flag("s64", "-9"), Flag("sf32", "-2"), Flag("d", "1e300"), Flag("by", "raw"),
           Flag("inner.deepest.s32", "-3"), Flag("inner.deepest.f64", "9"),
           Flag("inner.colors", "red,Dark_Blue"), Flag("r_b", "true,0"), Flag("r_s", "a,,b"),
           Flag("maybe", "0"), Flag("choice_int", "5"), Flag("choice_text", "t")},
          "", &m)
          .ok());
  EXPECT_EQ(m.s64(), -9);
  EXPECT_EQ(m.sf32(), -2);
  EXPECT_EQ(m.d(), 1e300);
  EXPECT_EQ(m.by(), "raw");
  EXPECT_EQ(m.inner().deepest().s32(), -3);
  EXPECT_EQ(m.inner().deepest().f64(), 9u);
  EXPECT_THAT(m.inner().colors(),
              ElementsAre(config_flags_test::RED, config_flags_test::DARK_BLUE));
  EXPECT_THAT(m.r_b(), ElementsAre(true, false));
  EXPECT_THAT(m.r_s(), ElementsAre("a", "", "b"));
  EXPECT_TRUE(m.has_maybe());       // set to 0, which an optional field keeps
  EXPECT_EQ(m.choice_text(), "t");  // the later member of the oneof wins
  EXPECT_FALSE(m.has_choice_int());

  const absl::Status repeated = ApplyConfigFlags({Flag("r_inner.i32", "1")}, "", &m);
  EXPECT_THAT(std::string(repeated.message()),
              HasSubstr("r_inner is a repeated field of attnkit.config_flags_test.Inner messages; "
                        "set it in the --config file"));
  EXPECT_FALSE(ApplyConfigFlags({Flag("counts", "a")}, "", &m).ok());
}

// Every field that takes a value, walked here apart from the library: its
// path, for the flags, and its descriptor.
void LeafFields(const Descriptor& d, const std::string& prefix,
                std::vector<std::pair<std::string, const FieldDescriptor*>>* out) {
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor* f = d.field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      out->emplace_back(prefix + f->name(), f);
    } else if (!f->is_repeated()) {
      LeafFields(*f->message_type(), prefix + f->name() + ".", out);
    }
  }
}

// One value of f's type, spelled as a person would (not its default).
std::string SampleValue(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "-7";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "7";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "0.5";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::AsciiStrToLower(f.enum_type()->value(f.enum_type()->value_count() - 1)->name());
    default:
      return "text";
  }
}

// Each field of `prototype`'s type, set by its flag alone, holds a value
// afterwards; and the help lists exactly these flags. A field added to the
// proto is covered with no change to the CLI or to this test.
void ExpectEveryFieldHasAFlag(const Message& prototype) {
  std::vector<std::pair<std::string, const FieldDescriptor*>> fields;
  LeafFields(*prototype.GetDescriptor(), "", &fields);
  ASSERT_FALSE(fields.empty());
  std::vector<std::string> documented;
  for (const ConfigFlagDoc& doc : ConfigFlagDocs(*prototype.GetDescriptor())) {
    documented.push_back(doc.path);
    EXPECT_EQ(doc.usage.rfind("--config." + doc.path, 0), 0u) << doc.usage;
  }
  std::vector<std::string> paths;
  for (const auto& [path, f] : fields) {
    paths.push_back(path);
    SCOPED_TRACE(path);
    std::unique_ptr<Message> m(prototype.New());
    const std::string value = SampleValue(*f);
    const absl::Status s =
        ApplyConfigFlags({Flag(path, f->is_repeated() ? value + "," + value : value)}, "", m.get());
    ASSERT_TRUE(s.ok()) << s;
    const Message* holder = m.get();
    const std::vector<std::string> names = absl::StrSplit(path, '.');
    for (size_t i = 0; i + 1 < names.size(); ++i) {
      const FieldDescriptor* sub = holder->GetDescriptor()->FindFieldByName(names[i]);
      holder = &holder->GetReflection()->GetMessage(*holder, sub);
    }
    if (f->is_repeated()) {
      EXPECT_EQ(holder->GetReflection()->FieldSize(*holder, f), 2);
    } else {
      EXPECT_TRUE(holder->GetReflection()->HasField(*holder, f));
    }
  }
  EXPECT_EQ(documented, paths);
}

TEST(ConfigFlagDocs, EveryFieldOfAttentionConfigHasAFlag) {
  ExpectEveryFieldHasAFlag(AttentionConfig::default_instance());
}

TEST(ConfigFlagDocs, EveryKindOfFieldHasAFlag) {
  ExpectEveryFieldHasAFlag(config_flags_test::AllKinds::default_instance());
}

TEST(ConfigFlagDocs, UsageShowsTheTypeAndTheEnumValues) {
  std::vector<std::string> usage;
  for (const ConfigFlagDoc& doc : ConfigFlagDocs(*AttentionConfig::descriptor())) {
    usage.push_back(doc.usage);
  }
  EXPECT_THAT(usage, ::testing::IsSupersetOf({
                         "--config.num_heads=INT64",
                         "--config.mask.kind=KIND_UNSPECIFIED|NONE|CAUSAL|SLIDING_WINDOW",
                         "--config.mask.window_left=INT64",
                         "--config.scale=FLOAT",
                         "--config.kv_lengths=INT64,...",
                         "--config.return_lse[=true|false]",
                         "--config.seed=UINT64",
                     }));
}

}  // namespace
}  // namespace attnkit

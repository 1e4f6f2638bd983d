// The problem's one field table (ATTNKIT_PROBLEM_FIELDS, attnkit/plugin.h)
// against config.proto: every row is a config field of the same name (or
// one of the few converted by hand), every config field is a row, and a
// config that sets every field survives config -> problem -> config.
#include "core/problem_config.h"

#include <set>
#include <string>

#include "attnkit/plugin.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

// The rows of the table, by name.
std::set<std::string> TableFields() {
  std::set<std::string> names;
#define ATTNKIT_NAME(kind, name) names.insert(#name);
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_NAME)
#undef ATTNKIT_NAME
  return names;
}

// Config fields that live in the MaskSpec message rather than at the top.
const std::set<std::string> kMaskFields = {"window_left", "window_right"};

TEST(ProblemFieldTable, EveryRowIsAConfigField) {
  const google::protobuf::Descriptor* config = AttentionConfig::descriptor();
  const google::protobuf::Descriptor* mask = MaskSpec::descriptor();
  for (const std::string& name : TableFields()) {
    const bool top = config->FindFieldByName(name) != nullptr;
    const bool in_mask = kMaskFields.count(name) > 0 && mask->FindFieldByName(name) != nullptr;
    EXPECT_TRUE(top || in_mask) << "problem field '" << name
                                << "' has no config.proto field of that name";
  }
}

TEST(ProblemFieldTable, EveryConfigFieldIsARow) {
  const std::set<std::string> table = TableFields();
  const google::protobuf::Descriptor* config = AttentionConfig::descriptor();
  for (int i = 0; i < config->field_count(); ++i) {
    EXPECT_TRUE(table.count(config->field(i)->name()) > 0)
        << "config.proto field '" << config->field(i)->name()
        << "' is not a row of ATTNKIT_PROBLEM_FIELDS (attnkit/plugin.h)";
  }
}

// Three valid configs (a training step, a paged ragged serving batch, a
// check with poisoned inputs)
// that between them set every field away from its default, so a field the
// conversions drop shows.
constexpr const char* kTrainingConfig = R"pb(
  name: "training"
  num_heads: 8
  num_kv_heads: 2
  head_dim: 32
  model_dim: 200
  mask { kind: SLIDING_WINDOW window_left: 5 window_right: 3 }
  alignment: TOP_LEFT
  scale: 0.25
  softcap: 30
  dtype: F32
  kv_dtype: F32
  batch: 2
  q_len: 16
  kv_len: 64
  kv_lengths: [ 40, 64 ]
  blocked_mask: true
  additive_bias: true
  return_lse: true
  backend: "highway"
  seed: 77
  backward: true
)pb";
constexpr const char* kServingConfig = R"pb(
  compute: FAST
  name: "serving"
  num_heads: 4
  head_dim: 64
  mask { kind: CAUSAL }
  alignment: BOTTOM_RIGHT
  dtype: BF16
  kv_dtype: INT8
  layout: BTHD
  batch: 2
  q_len: 16
  kv_len: 64
  kv_lengths: [ 64, 30 ]
  q_lengths: [ 16, 1 ]
  page_size: 16
  num_pages: 9
  memory_budget_bytes: 123456789
  sinks: true
  alibi: true
  value_head_dim: 48
)pb";
constexpr const char* kPoisonedConfig = R"pb(
  num_heads: 2
  head_dim: 16
  q_len: 8
  kv_len: 8
  dtype: F16
  poison_blocked: true
  nonfinite_inputs: 3
)pb";

TEST(ProblemFieldTable, EveryFieldRoundTrips) {
  std::set<std::string> set_somewhere;
  for (const char* text : {kTrainingConfig, kServingConfig, kPoisonedConfig}) {
    AttentionConfig c;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c)) << text;
    const google::protobuf::Reflection* r = c.GetReflection();
    for (int i = 0; i < c.descriptor()->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = c.descriptor()->field(i);
      if (f->is_repeated() ? r->FieldSize(c, f) > 0 : r->HasField(c, f)) {
        set_somewhere.insert(f->name());
      }
    }
    absl::StatusOr<AttentionProblem> p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << c.DebugString();
    // Every field c sets comes back with its value (the defaults c leaves
    // unset come back filled in, which PARTIAL ignores).
    const AttentionConfig back = ConfigFromProblem(*p);
    google::protobuf::util::MessageDifferencer differ;
    differ.set_scope(google::protobuf::util::MessageDifferencer::PARTIAL);
    std::string report;
    differ.ReportDifferencesToString(&report);
    EXPECT_TRUE(differ.Compare(c, back)) << report;
  }
  const google::protobuf::Descriptor* config = AttentionConfig::descriptor();
  for (int i = 0; i < config->field_count(); ++i) {
    EXPECT_TRUE(set_somewhere.count(config->field(i)->name()) > 0)
        << "set '" << config->field(i)->name() << "' in one of this test's configs";
  }
}

}  // namespace
}  // namespace attnkit

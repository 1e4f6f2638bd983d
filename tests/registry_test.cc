// The registry: built-ins, plugin loading and its failures, name lookup and
// `auto` selection.
#include "plugin/registry.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "attnkit/plugin.h"
#include "backends/reference/reference_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

const char kPlugin[] = "backends/reference/libattnkit_reference_plugin.so";
const char kNewerAbi[] = "tests/testdata/libnewer_abi_plugin.so";
const char kOlderTable[] = "tests/testdata/libolder_table_plugin.so";
const char kNotAPlugin[] = "tests/testdata/libnot_a_plugin.so";

TEST(RegistryTest, LoadsAPluginAndRunsIt) {
  BackendRegistry r;
  ASSERT_TRUE(r.LoadPlugin(kPlugin).ok());
  auto b = r.Find("reference-plugin");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT((*b)->Description(), HasSubstr("fp64"));
  EXPECT_TRUE(r.plugin_failures().empty());
}

TEST(RegistryTest, PluginFailuresNameTheFileAndReason) {
  BackendRegistry r;
  ASSERT_TRUE(r.Register(MakeReferenceBackend()).ok());
  absl::Status s = r.LoadPlugin("/nonexistent/libx.so");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("plugin /nonexistent/libx.so: cannot load"));
  s = r.LoadPlugin(kNotAPlugin);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("not an attnkit plugin: symbol attnkit_plugin_entry is missing"));
  s = r.LoadPlugin(kNewerAbi);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(kNewerAbi, " (from-the-future): built for plugin ABI ",
                                     ATTNKIT_PLUGIN_ABI_VERSION + 1, "; this attnkit loads ABI ",
                                     ATTNKIT_PLUGIN_ABI_VERSION)));
  EXPECT_EQ(r.plugin_failures().size(), 3u);
  // The registry keeps working with what it has.
  EXPECT_TRUE(r.Find("reference").ok());
  // Loading the same plugin twice is a duplicate name, not a crash.
  ASSERT_TRUE(r.LoadPlugin(kPlugin).ok());
  EXPECT_THAT(std::string(r.LoadPlugin(kPlugin).message()), HasSubstr("already registered"));
}

// A plain-C plugin whose function table stops after the required functions
// (an older plugin): it loads, runs right, and what it lacks is reported.
TEST(RegistryTest, OlderFunctionTableLoadsAndSaysWhatItLacks) {
  BackendRegistry r;
  ASSERT_TRUE(r.LoadPlugin(kOlderTable).ok());
  auto found = r.Find("c-naive");
  ASSERT_TRUE(found.ok()) << found.status();
  Backend* b = *found;
  EXPECT_TRUE(b->Available().ok());
  EXPECT_TRUE(b->UsesHostMemory());
  EXPECT_EQ(b->NumThreads(), 1);
  EXPECT_TRUE(b->Synchronize().ok());
  const absl::Status stream = b->SetStream(nullptr);
  EXPECT_EQ(stream.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(stream.message()), HasSubstr("c-naive does not provide set_stream"));

  AttentionProblem p = BasicProblem(2, 4, 2, 5, 9, 16);
  p.name = p.Id();
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok());
  RunInfo info;
  ASSERT_TRUE(RunOnBackend(b, p, *data, &info).ok());
  EXPECT_EQ(info.kernel, "naive-c");
  EXPECT_EQ(info.workspace_allocations, -1);
  const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
  EXPECT_TRUE(c.ok()) << c.first_failure;
  // Its capabilities came across the C table: a causal mask is refused.
  p.mask = MaskKind::kCausal;
  EXPECT_THAT(std::string(b->Supports(p).message()), HasSubstr("mask"));
}

TEST(RegistryTest, HostBackendsHaveNoStreamToSet) {
  const auto b = MakeReferenceBackend();
  const absl::Status s = b->SetStream(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr(b->Name() + " runs on the host"));
}

TEST(RegistryTest, UnknownNamesListWhatExists) {
  BackendRegistry r;
  ASSERT_TRUE(r.Register(MakeReferenceBackend()).ok());
  EXPECT_FALSE(r.Register(MakeReferenceBackend()).ok());
  auto b = r.Find("hihgway");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("unknown backend 'hihgway'; registered: reference"));
}

TEST(RegistryTest, AutoSaysWhatItPickedAndWhy) {
  BackendRegistry r;
  ASSERT_TRUE(r.Register(MakeReferenceBackend()).ok());
  AttentionProblem p;
  p.num_heads = p.num_kv_heads = 1;
  p.head_dim = 8;
  auto sel = r.Select("auto", p, {"fast-but-absent", "reference"});
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->backend->Name(), "reference");
  EXPECT_THAT(sel->reason, HasSubstr("auto: reference is the first backend"));
  sel = r.Select("reference", p, {});
  ASSERT_TRUE(sel.ok());
  EXPECT_THAT(sel->reason, HasSubstr("chosen by name"));
  EXPECT_FALSE(r.Select("nope", p, {}).ok());
}

// Claims device memory: auto must never hand it host tensors.
class FakeDeviceBackend : public Backend {
 public:
  std::string Name() const override { return "fake-device"; }
  std::string Description() const override { return "reads device memory"; }
  Capabilities Caps() const override { return MakeReferenceBackend()->Caps(); }
  bool UsesHostMemory() const override { return false; }

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    return absl::InternalError("never runs in this test");
  }
};

TEST(RegistryTest, AutoForHostMemoryPassesOverDeviceBackends) {
  AttentionProblem p;
  p.num_heads = p.num_kv_heads = 1;
  p.head_dim = 8;
  BackendRegistry r;
  ASSERT_TRUE(r.Register(std::make_unique<FakeDeviceBackend>()).ok());
  // Alone, the device backend is what auto finds; for host tensors, nothing.
  auto sel = r.Select("auto", p, {"fake-device"});
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->backend->Name(), "fake-device");
  sel = r.Select("auto", p, {"fake-device"}, /*host_memory_only=*/true);
  EXPECT_EQ(sel.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(sel.status().message()), HasSubstr("no registered host-memory backend"));
  // First in the order, or only among the others registered: passed over.
  ASSERT_TRUE(r.Register(MakeReferenceBackend()).ok());
  sel = r.Select("auto", p, {"fake-device"}, /*host_memory_only=*/true);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->backend->Name(), "reference");
  sel = r.Select("auto", p, {}, /*host_memory_only=*/true);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->backend->Name(), "reference");
  // A name is taken as given.
  sel = r.Select("fake-device", p, {}, /*host_memory_only=*/true);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->backend->Name(), "fake-device");
}

}  // namespace
}  // namespace attnkit

// Fuzzes the text-format config loader and validation: any text either fails
// with a status or gives a problem that survives a round trip through the
// config. Small valid problems (paged, ragged and int8 ones included) are
// also filled with random (and poisoned) inputs and run on the reference
// backend, which must give finite outputs.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "backends/reference/reference_backend.h"
#include "core/problem.h"
#include "core/problem_config.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "io/config_io.h"
#include "tests/fuzz/fuzz_check.h"

namespace attnkit {
namespace {

// Caps the work of one run: B * H * Tq * Tk * d multiply-adds.
constexpr double kMaxWork = 2e5;
// Caps the tensors of one run (ProblemBytes), a paged pool included.
constexpr int64_t kMaxBytes = int64_t{64} << 20;

void CheckRoundTrip(const AttentionProblem& p) {
  const std::string text = ConfigToText(ConfigFromProblem(p));
  auto config = ParseConfigText(text, "round trip");
  FUZZ_CHECK(config.ok(), "%s", std::string(config.status().message()).c_str());
  auto again = ProblemFromConfig(*config);
  FUZZ_CHECK(again.ok(), "%s\n%s", std::string(again.status().message()).c_str(), text.c_str());
  FUZZ_CHECK(ConfigToText(ConfigFromProblem(*again)) == text, "round trip changed\n%s",
             text.c_str());
}

void RunSmall(const AttentionProblem& p) {
  const double work = double(p.batch) * double(p.num_heads) * double(p.q_len) * double(p.kv_len) *
                      double(p.head_dim);
  if (work > kMaxWork) return;
  // A paged pool's size is its own (num_pages), not bounded by the work.
  const absl::StatusOr<int64_t> bytes = ProblemBytes(p);
  if (!bytes.ok() || *bytes > kMaxBytes) return;
  auto data = ProblemData::Random(p, p.seed);
  if (!data.ok()) return;  // e.g. over the memory budget
  static Backend* reference = MakeReferenceBackend().release();
  PoisonOutputs(*data);
  const absl::Status run = RunOnBackend(reference, p, *data, nullptr);
  FUZZ_CHECK(run.ok(), "%s", std::string(run.message()).c_str());
  const TensorView o = data->o.view();
  ForEachOffset(o, [&](int64_t off) {
    FUZZ_CHECK(std::isfinite(o.LoadF32(off)), "non-finite output on %s", p.Id().c_str());
  });
}

}  // namespace
}  // namespace attnkit

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  auto config =
      ParseConfigText(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!config.ok()) return 0;
  auto problem = ProblemFromConfig(*config);
  if (!problem.ok()) {
    FUZZ_CHECK(!problem.status().message().empty(), "an error without a message");
    return 0;
  }
  CheckRoundTrip(*problem);
  RunSmall(*problem);
  return 0;
}

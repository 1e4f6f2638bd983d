#include "tools/diff_fuzz/diff_fuzz.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/problem.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/checked_run.h"
#include "harness/problem_data.h"
#include "io/config_io.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tools/diff_fuzz/random_config.h"

namespace attnkit {

absl::Status CheckOnBackend(const AttentionConfig& config, Backend* backend, bool* ran) {
  if (ran != nullptr) *ran = false;
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  if (!backend->Supports(p).ok()) return absl::OkStatus();
  if (ran != nullptr) *ran = true;
  // The same inputs as `attnkit check`: ProblemData::Random(p, p.seed).
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, p.seed));
  const ReferenceResult ref = ComputeReference(p, data.args());
  // Twice when a row must come out NaN (harness/checked_run.h).
  const CheckedRun run = RunAndCompare(backend, p, data, ref);
  if (!run.run.ok()) return absl::InternalError(absl::StrCat("error: ", run.run.message()));
  const Comparison& c = run.comparison;
  if (c.ok()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("[%s] %d of %d outside tolerance%s; max abs error %.3g; first: %s",
                      run.info.kernel, c.mismatches, c.checked,
                      c.non_finite ? ", non-finite output" : "", c.max_abs_err, c.first_failure));
}

namespace {

// Candidate reductions of a failing config, simplest first.
std::vector<AttentionConfig> Reductions(const AttentionConfig& c) {
  std::vector<AttentionConfig> out;
  auto add = [&](auto edit) {
    AttentionConfig r = c;
    edit(r);
    if (r.SerializeAsString() != c.SerializeAsString()) out.push_back(r);
  };
  add([](AttentionConfig& r) { r.clear_compute(); });  // EXACT
  add([](AttentionConfig& r) { r.set_nonfinite_inputs(0); });
  add([](AttentionConfig& r) { r.set_poison_blocked(false); });
  add([](AttentionConfig& r) { r.set_blocked_mask(false); });
  add([](AttentionConfig& r) { r.set_additive_bias(false); });
  add([](AttentionConfig& r) { r.set_softcap(0); });
  add([](AttentionConfig& r) { r.set_return_lse(false); });
  // Serving features off: dense K/V, one query count for all, float K/V.
  add([](AttentionConfig& r) {
    r.set_page_size(0);
    r.set_num_pages(0);
  });
  add([](AttentionConfig& r) { r.set_num_pages(0); });  // the default pool
  add([](AttentionConfig& r) { r.clear_q_lengths(); });
  add([](AttentionConfig& r) { r.clear_kv_lengths(); });
  add([](AttentionConfig& r) { r.clear_mask(); });
  add([](AttentionConfig& r) { r.clear_scale(); });
  add([](AttentionConfig& r) { r.set_layout(BHTD); });
  add([](AttentionConfig& r) { r.set_dtype(F32); });
  add([](AttentionConfig& r) { r.set_kv_dtype(r.dtype()); });
  add([](AttentionConfig& r) {  // one batch entry: keep the first lengths
    r.set_batch(1);
    if (r.kv_lengths_size() > 1) r.mutable_kv_lengths()->Truncate(1);
    if (r.q_lengths_size() > 1) r.mutable_q_lengths()->Truncate(1);
  });
  // Each sequence alone (batch 1 with its lengths), for a ragged or padded
  // batch whose failure is in a later sequence.
  for (int64_t b = 1; b < c.kv_lengths_size(); ++b) {
    add([b](AttentionConfig& r) {
      r.set_batch(1);
      r.set_kv_lengths(0, r.kv_lengths(b));
      r.mutable_kv_lengths()->Truncate(1);
      if (r.q_lengths_size() > b) {
        r.set_q_lengths(0, r.q_lengths(b));
        r.mutable_q_lengths()->Truncate(1);
      }
    });
  }
  add([](AttentionConfig& r) { r.set_num_heads(r.num_kv_heads()); });
  add([](AttentionConfig& r) {
    r.set_num_heads(r.num_heads() / r.num_kv_heads());
    r.set_num_kv_heads(1);
  });
  auto shrink_len = [&](bool q, int64_t to) {
    add([&](AttentionConfig& r) {
      if (q) {
        r.set_q_len(to);
        for (int64_t& l : *r.mutable_q_lengths()) l = std::min(l, to);
      } else {
        r.set_kv_len(to);
        for (int64_t& l : *r.mutable_kv_lengths()) l = std::min(l, to);
      }
    });
  };
  for (bool q : {true, false}) {
    const int64_t len = q ? c.q_len() : c.kv_len();
    for (int64_t to : {int64_t{1}, len / 2, len - 1}) {
      if (to >= 1 && to < len) shrink_len(q, to);
    }
  }
  for (int64_t to : {int64_t{1}, c.head_dim() / 2, c.head_dim() - 1}) {
    if (to >= 1 && to < c.head_dim()) add([&](AttentionConfig& r) { r.set_head_dim(to); });
  }
  if (c.value_head_dim() > 0) {
    add([](AttentionConfig& r) { r.clear_value_head_dim(); });
    for (int64_t to : {int64_t{1}, c.value_head_dim() / 2, c.value_head_dim() - 1}) {
      if (to >= 1) add([&](AttentionConfig& r) { r.set_value_head_dim(to); });
    }
  }
  if (c.mask().kind() == MaskSpec::SLIDING_WINDOW) {
    add([](AttentionConfig& r) { r.mutable_mask()->set_window_left(0); });
    add([](AttentionConfig& r) { r.mutable_mask()->set_window_right(0); });
  }
  for (int64_t i = 0; i < c.kv_lengths_size(); ++i) {
    if (c.kv_lengths(i) > 0) add([&](AttentionConfig& r) { r.set_kv_lengths(i, 0); });
  }
  for (int64_t i = 0; i < c.q_lengths_size(); ++i) {
    if (c.q_lengths(i) > 0) add([&](AttentionConfig& r) { r.set_q_lengths(i, 0); });
    if (c.q_lengths(i) > 1) add([&](AttentionConfig& r) { r.set_q_lengths(i, 1); });
  }
  if (c.page_size() > 16) add([](AttentionConfig& r) { r.set_page_size(16); });
  add([](AttentionConfig& r) { r.clear_model_dim(); });
  return out;
}

}  // namespace

AttentionConfig Shrink(const AttentionConfig& failing, Backend* backend, int max_steps) {
  return ShrinkWhile(
      failing, [backend](const AttentionConfig& c) { return !CheckOnBackend(c, backend).ok(); },
      max_steps);
}

AttentionConfig ShrinkWhile(const AttentionConfig& failing,
                            const std::function<bool(const AttentionConfig&)>& fails,
                            int max_steps) {
  AttentionConfig best = failing;
  int steps = 0;
  bool progress = true;
  while (progress && steps < max_steps) {
    progress = false;
    for (const AttentionConfig& r : Reductions(best)) {
      if (++steps > max_steps) break;
      if (!ProblemFromConfig(r).ok()) continue;
      if (fails(r)) {
        best = r;
        progress = true;
        break;
      }
    }
  }
  return best;
}

FuzzReport RunFuzzCampaign(const std::vector<Backend*>& backends, const FuzzOptions& options,
                           const FuzzCampaign& campaign,
                           const std::function<void(const std::string&)>& progress) {
  FuzzReport report;
  std::mt19937_64 rng(options.seed);
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  std::vector<Backend*> available;
  for (Backend* b : backends) {
    const absl::Status s = b->Available();
    if (s.ok()) {
      available.push_back(b);
    } else {
      report.unavailable.push_back(absl::StrCat(b->Name(), ": ", s.message()));
      say(absl::StrCat("unavailable: ", report.unavailable.back()));
    }
  }
  for (Backend* b : available) report.per_backend.push_back(FuzzTally{b->Name()});
  const std::string file_prefix = absl::StrReplaceAll(campaign.name_prefix, {{"-", "_"}});
  for (int64_t n = 0; n < options.count; ++n) {
    AttentionConfig config = campaign.draw(rng);
    config.set_name(absl::StrFormat("%s-%d-%d", campaign.name_prefix, options.seed, n));
    if (options.compute == FuzzCompute::kExact) config.clear_compute();
    if (options.compute == FuzzCompute::kFast) {
      // A training step is FAST only with one dtype for Q and K/V
      // (core/problem.h ValidateFastBackward); the others stay EXACT.
      AttentionConfig fast = config;
      fast.set_compute(FAST);
      const absl::StatusOr<AttentionProblem> p = ProblemFromConfig(fast);
      if (!campaign.backward || (p.ok() && ValidateFastBackward(*p).ok())) config = fast;
    }
    ++report.problems;
    report.fast_problems += config.compute() == FAST ? 1 : 0;
    for (size_t bi = 0; bi < available.size(); ++bi) {
      Backend* b = available[bi];
      FuzzTally& tally = report.per_backend[bi];
      bool ran = false;
      const absl::Status s = campaign.check(config, b, &ran);
      report.runs += ran ? 1 : 0;
      report.unsupported += ran ? 0 : 1;
      tally.runs += ran ? 1 : 0;
      tally.unsupported += ran ? 0 : 1;
      if (s.ok()) continue;
      ++tally.mismatches;
      const AttentionConfig small = ShrinkWhile(
          config, [&](const AttentionConfig& c) { return !campaign.check(c, b, nullptr).ok(); });
      FuzzFinding f;
      f.backend = b->Name();
      f.message = std::string(campaign.check(small, b, nullptr).message());
      f.config_path = absl::StrFormat("%s/attnkit_%s_%d_%d_%s.textproto", options.repro_dir,
                                      file_prefix, options.seed, n, b->Name());
      const absl::Status w = WriteFileAtomically(f.config_path, ConfigToText(small));
      f.command = w.ok() ? absl::StrFormat("attnkit check%s --config=%s --backends=%s",
                                           campaign.check_flags, f.config_path, b->Name())
                         : absl::StrCat("(could not write the config: ", w.message(), ")");
      say(absl::StrFormat("%sMISMATCH %s on problem %d: %s\n  shrunk: %s\n  repro: %s",
                          campaign.what.empty() ? "" : "GRADIENT ", f.backend, n, s.message(),
                          f.message, f.command));
      report.findings.push_back(f);
    }
    if ((n + 1) % 100 == 0) {
      say(absl::StrFormat("%d problems, %d %sruns, %d unsupported, %d findings", n + 1, report.runs,
                          campaign.what, report.unsupported, report.findings.size()));
    }
  }
  return report;
}

absl::Status RequireNamedBackendsRan(const FuzzReport& report,
                                     const std::vector<std::string>& named) {
  std::vector<std::string> idle;
  for (const FuzzTally& t : report.per_backend) {
    if (t.runs > 0 || std::find(named.begin(), named.end(), t.backend) == named.end()) continue;
    idle.push_back(
        absl::StrFormat("%s declined all %d problems (unsupported)", t.backend, t.unsupported));
  }
  if (idle.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("named backends ran none of their problems: ", absl::StrJoin(idle, "; ")));
}

FuzzReport FuzzBackends(const std::vector<Backend*>& backends, const FuzzOptions& options,
                        const std::function<void(const std::string&)>& progress) {
  FuzzCampaign forward;
  forward.name_prefix = "fuzz";
  forward.draw = [](std::mt19937_64& rng) { return RandomConfig(rng); };
  forward.check = [](const AttentionConfig& c, Backend* b, bool* ran) {
    return CheckOnBackend(c, b, ran);
  };
  return RunFuzzCampaign(backends, options, forward, progress);
}

}  // namespace attnkit

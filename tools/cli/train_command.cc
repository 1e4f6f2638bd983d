// `attnkit train`: a tiny Transformer learns the copy or reverse task
// (ops/train_task.h) with Adam, through the attention backward pass of the
// chosen backend. Every step draws a fresh batch from --seed, so the accuracy
// printed is on sequences the model has not seen.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/builtin.h"
#include "core/problem.h"
#include "core/status_macros.h"
#include "io/json_writer.h"
#include "ops/adam.h"
#include "ops/sequence_model.h"
#include "ops/train_task.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::Status CheckFlags(const CliOptions& options, const TrainOptions& t) {
  const struct {
    const char* flag;
    int64_t value, min, max;
  } ranges[] = {{"steps", t.steps, 1, 10000000},
                {"seq", t.seq, 1, 1024},
                {"vocab", t.vocab, 3, 1 << 20},
                {"dim", t.dim, 1, 4096},
                {"heads", t.heads, 1, 256},
                {"kv_heads", t.kv_heads, 1, 256},
                {"layers", options.layers, 1, 64},
                {"batch", t.batch, 1, 4096},
                {"threads", options.threads, 0, 1024},
                {"log_every", t.log_every, 0, 10000000}};
  for (const auto& r : ranges) {
    if (r.value < r.min || r.value > r.max) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s (%d) must be in [%d, %d]", r.flag, r.value, r.min, r.max));
    }
  }
  if (!ParseTrainTask(t.task).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task (", t.task, ") must be copy or reverse"));
  }
  if (!(t.lr > 0.0) || !std::isfinite(t.lr) || t.lr > 1.0) {
    return absl::InvalidArgumentError(absl::StrFormat("--lr (%g) must be in (0, 1]", t.lr));
  }
  if (t.dim % t.heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dim (%d) must be a multiple of --heads (%d): head_dim = dim / heads", t.dim, t.heads));
  }
  if (t.heads % t.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--heads (%d) must be a multiple of --kv_heads (%d)", t.heads, t.kv_heads));
  }
  return absl::OkStatus();
}

// The attention problem one block trains on: causal self-attention over
// 2 * seq tokens, BTHD, with the LSE the backward pass needs.
AttentionProblem TrainProblem(const TrainOptions& t) {
  AttentionProblem p;
  p.batch = t.batch;
  p.num_heads = t.heads;
  p.num_kv_heads = t.kv_heads;
  p.head_dim = t.dim / t.heads;
  p.model_dim = t.dim;
  p.q_len = p.kv_len = 2 * t.seq;
  p.mask = MaskKind::kCausal;
  p.layout = Layout::kBTHD;
  p.return_lse = true;
  p.scale = 1.0f / std::sqrt(float(p.head_dim));
  return p;
}

// --backend by name, or auto: the first of DefaultAutoOrder() that runs the
// forward and backward pass of `p` on host memory. Returns the name and why.
absl::StatusOr<std::pair<std::string, std::string>> ChooseTrainBackend(
    const BackendRegistry& registry, const std::string& name, const AttentionProblem& p) {
  const auto trains = [&p](Backend* b) -> absl::Status {
    if (!b->UsesHostMemory()) {
      return absl::UnimplementedError("it keeps tensors in device memory; training runs on host");
    }
    ATTNKIT_RETURN_IF_ERROR(b->Supports(p));
    return b->SupportsBackward(p);
  };
  if (!name.empty() && name != "auto") {
    absl::StatusOr<Backend*> b = registry.Find(name);
    if (!b.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--backend (", name, "): ", b.status().message()));
    const absl::Status s = trains(*b);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--backend (", name, ") cannot train this model: ", s.message()));
    }
    return std::make_pair(name, std::string("named by --backend"));
  }
  std::string skipped;
  for (const std::string& candidate : DefaultAutoOrder()) {
    absl::StatusOr<Backend*> b = registry.Find(candidate);
    if (!b.ok()) continue;
    const absl::Status s = trains(*b);
    if (s.ok()) {
      return std::make_pair(
          candidate, absl::StrCat("auto: the first backend in the default order that runs the "
                                  "backward pass here",
                                  skipped.empty() ? "" : "; skipped: ", skipped));
    }
    absl::StrAppend(&skipped, skipped.empty() ? "" : "; ", candidate, " (", s.message(), ")");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no registered backend can train this model: ", skipped));
}

struct Point {
  int64_t step;
  double loss, accuracy;
};

}  // namespace

absl::Status TrainCommand(const BackendRegistry& registry, const CliOptions& options,
                          const TrainOptions& train, std::ostream& json_out) {
  std::ostringstream discard;  // with --json=- the report is the only output
  std::ostream& out = JsonToStdout(options) ? discard : json_out;
  ATTNKIT_RETURN_IF_ERROR(CheckFlags(options, train));
  const TrainTask task = *ParseTrainTask(train.task);
  const AttentionProblem problem = TrainProblem(train);
  ATTNKIT_ASSIGN_OR_RETURN(const auto chosen,
                           ChooseTrainBackend(registry, options.backend, problem));
  if (options.threads > 0) {
    for (Backend* b : registry.All()) {
      if (b->UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(b->SetNumThreads(options.threads));
    }
  }
  SequenceModelConfig mc;
  mc.vocab = train.vocab;
  mc.max_len = 2 * train.seq;
  mc.dim = train.dim;
  mc.heads = train.heads;
  mc.kv_heads = train.kv_heads;
  mc.layers = options.layers;
  mc.backend = chosen.first;
  mc.threads = options.threads;
  mc.seed = options.seed;
  ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<SequenceModel> model,
                           SequenceModel::Create(mc, registry));
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<ParamRef> params, model->Parameters());
  AdamOptions ao;
  ao.lr = static_cast<float>(train.lr);
  ATTNKIT_ASSIGN_OR_RETURN(Adam adam, Adam::Create(params, ao));

  const int64_t tokens_per_step = train.batch * 2 * train.seq;
  const int64_t log_every =
      train.log_every > 0 ? train.log_every : std::max<int64_t>(1, train.steps / 20);
  out << absl::StrFormat(
      "train: task %s, %d layers, dim %d, %d heads (%d kv heads, head_dim %d), vocab %d, "
      "seq %d (the model reads %d tokens), batch %d, %d steps, Adam lr %g; %d parameters\n",
      train.task, options.layers, train.dim, train.heads, train.kv_heads, problem.head_dim,
      train.vocab, train.seq, 2 * train.seq, train.batch, train.steps, train.lr,
      model->NumParameters());
  out << absl::StrFormat("backend %s (%s); matmul %s\n", chosen.first, chosen.second,
                         model->block(0).attention().matmul().Name());
  out << absl::StrFormat("%8s %10s %9s %12s\n", "step", "loss", "accuracy", "tokens/s");

  std::mt19937_64 rng(options.seed);
  std::vector<Point> curve;
  curve.reserve(train.steps);
  const Clock::time_point start = Clock::now();
  Clock::time_point mark = start;
  int64_t mark_step = 0;
  for (int64_t step = 1; step <= train.steps; ++step) {
    ATTNKIT_ASSIGN_OR_RETURN(const TaskBatch batch,
                             MakeTaskBatch(task, train.vocab, train.seq, train.batch, &rng));
    ATTNKIT_RETURN_IF_ERROR(model->ZeroGradients());
    ATTNKIT_ASSIGN_OR_RETURN(const LossResult r, model->ForwardTrain(batch));
    ATTNKIT_RETURN_IF_ERROR(model->Backward());
    adam.Step();
    curve.push_back({step, r.loss, r.accuracy});
    if (!std::isfinite(r.loss)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the loss became %g at step %d; try a smaller --lr (now %g)", r.loss, step, train.lr));
    }
    if (step == 1 || step % log_every == 0 || step == train.steps) {
      const Clock::time_point now = Clock::now();
      const double rate = double((step - mark_step) * tokens_per_step) / Seconds(mark, now);
      out << absl::StrFormat("%8d %10.4f %8.1f%% %12.0f\n", step, r.loss, 100 * r.accuracy, rate);
      out.flush();
      mark = now;
      mark_step = step;
    }
  }
  const double total_s = Seconds(start, Clock::now());
  const MultiHeadAttention& attn = model->block(0).attention();
  const RunInfo& fwd = attn.last_run();
  const RunInfo& bwd = attn.last_backward_run();
  const Point& last = curve.back();
  out << absl::StrFormat("attention forward  %s [%s]\nattention backward %s [%s]\n", fwd.backend,
                         fwd.kernel, bwd.backend, bwd.kernel);
  out << absl::StrFormat(
      "total %.2f s for %d steps (%.0f tokens/s); final loss %.4f, accuracy %.1f%% on the "
      "target tokens\n",
      total_s, train.steps, train.steps * tokens_per_step / total_s, last.loss,
      100 * last.accuracy);

  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("task", train.task).Field("layers", options.layers).Field("dim", train.dim);
  w.Field("heads", train.heads).Field("kv_heads", train.kv_heads).Field("vocab", train.vocab);
  w.Field("seq", train.seq).Field("batch", train.batch).Field("steps", train.steps);
  w.Field("lr", train.lr).Field("seed", static_cast<int64_t>(options.seed));
  w.Field("threads", options.threads).Field("parameters", model->NumParameters());
  w.Field("backend", chosen.first).Field("backend_reason", chosen.second);
  w.Field("matmul", attn.matmul().Name());
  w.Key("attention_forward").BeginObject();
  w.Field("backend", fwd.backend).Field("kernel", fwd.kernel);
  w.EndObject();
  w.Key("attention_backward").BeginObject();
  w.Field("backend", bwd.backend).Field("kernel", bwd.kernel);
  w.EndObject();
  w.Field("seconds", total_s).Field("tokens_per_s", train.steps * tokens_per_step / total_s);
  w.Field("final_loss", last.loss).Field("final_accuracy", last.accuracy);
  w.Key("curve").BeginArray();
  for (const Point& p : curve) {
    w.BeginObject().Field("step", p.step).Field("loss", p.loss).Field("accuracy", p.accuracy);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return EmitJson(options, w.str(), json_out);
}

}  // namespace attnkit

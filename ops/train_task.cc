#include "ops/train_task.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnkit {

absl::StatusOr<TrainTask> ParseTrainTask(absl::string_view name) {
  if (name == "copy") return TrainTask::kCopy;
  if (name == "reverse") return TrainTask::kReverse;
  return absl::InvalidArgumentError(absl::StrCat("task '", name, "' is not one of: copy, reverse"));
}

const char* TrainTaskName(TrainTask task) { return task == TrainTask::kCopy ? "copy" : "reverse"; }

absl::StatusOr<TaskBatch> MakeTaskBatch(TrainTask task, int64_t vocab, int64_t source_len,
                                        int64_t batch, std::mt19937_64* rng) {
  if (vocab < 3 || source_len < 1 || batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vocab (%d) must be >= 3 (the separator and two symbols), source_len (%d) and batch (%d) "
        ">= 1",
        vocab, source_len, batch));
  }
  const int64_t n = source_len, L = 2 * n;
  TaskBatch out;
  out.batch = batch;
  out.length = L;
  out.tokens.assign(batch * L, kSeparatorToken);
  out.targets.assign(batch * L, kNotScored);
  std::uniform_int_distribution<int32_t> symbol(1, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> seq(2 * n + 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) seq[i] = symbol(*rng);
    seq[n] = kSeparatorToken;
    for (int64_t i = 0; i < n; ++i) {
      seq[n + 1 + i] = task == TrainTask::kCopy ? seq[i] : seq[n - 1 - i];
    }
    for (int64_t t = 0; t < L; ++t) {
      out.tokens[b * L + t] = seq[t];
      if (t >= n) out.targets[b * L + t] = seq[t + 1];  // b_1 .. b_n, predicted from SEP on
    }
  }
  out.scored = batch * n;
  return out;
}

}  // namespace attnkit

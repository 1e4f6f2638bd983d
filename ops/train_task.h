// Synthetic sequence tasks for training a tiny model with attention.
//
// A sequence of a task with source length n is
//   a_1 .. a_n  SEP  b_1 .. b_n          (2n + 1 tokens)
// with a_i drawn uniformly from the symbols 1 .. vocab-1, SEP = token 0, and
// b = a (copy) or b = reversed a (reverse). The model reads the first 2n
// tokens and predicts the next token at every position (causal attention);
// only the n predictions of b (made at SEP and b_1 .. b_{n-1}) are scored,
// since the a_i are random and cannot be predicted.
#ifndef ATTNKIT_OPS_TRAIN_TASK_H_
#define ATTNKIT_OPS_TRAIN_TASK_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnkit {

enum class TrainTask { kCopy, kReverse };

// "copy" or "reverse"; InvalidArgument naming the value and the choices.
absl::StatusOr<TrainTask> ParseTrainTask(absl::string_view name);
const char* TrainTaskName(TrainTask task);

constexpr int32_t kSeparatorToken = 0;
constexpr int32_t kNotScored = -1;

// One batch: tokens and targets [batch, length], length = 2 * source_len;
// targets[b, t] is the token after position t, or kNotScored.
struct TaskBatch {
  int64_t batch = 0, length = 0;
  std::vector<int32_t> tokens, targets;
  int64_t scored = 0;  // number of targets != kNotScored
};

// `batch` fresh random sequences from `rng`. InvalidArgument unless
// vocab >= 3 (the separator and two symbols), source_len >= 1, batch >= 1.
absl::StatusOr<TaskBatch> MakeTaskBatch(TrainTask task, int64_t vocab, int64_t source_len,
                                        int64_t batch, std::mt19937_64* rng);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_TRAIN_TASK_H_

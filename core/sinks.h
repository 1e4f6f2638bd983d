// Attention sinks (config.proto sinks): folding a head's sink logit into a
// finished softmax row. A row's keys carry exp(lse) of softmax mass; the sink
// adds exp(sink) to the denominator and nothing to the numerator, so every
// output element is multiplied by exp(lse) / (exp(lse) + exp(sink)) and the
// lse becomes log(exp(lse) + exp(sink)). This is the split-K merge of the row
// with one more partial whose output is 0, in f32: its error enters the
// oracle's bound as such (oracle/compare.h).
#ifndef ATTNKIT_CORE_SINKS_H_
#define ATTNKIT_CORE_SINKS_H_

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit {

struct SinkFold {
  float scale;  // multiplies every element of the row's normalised output
  float lse;    // the row's log-sum-exp with the sink
};

// The rules of config.proto: a row with no visible key (lse -inf) gives 0 and
// an lse of `sink`; a sink of -inf is no sink; a NaN or +inf sink, or a row
// already NaN, gives NaN (scale NaN: the row must be written as NaN).
inline SinkFold FoldSink(float lse, float sink) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (std::isnan(lse) || std::isnan(sink) || sink == kInf) return {nan, nan};
  if (sink == -kInf) return {1.0f, lse};
  if (lse == -kInf) return {0.0f, sink};
  const float m = std::max(lse, sink);
  const float keys = std::exp(lse - m), total = keys + std::exp(sink - m);  // total in [1, 2]
  return {keys / total, m + std::log(total)};
}

// The same fold taken before the row is normalised, from its running max m
// and sum l > 0 of exp(s - m) (an online-softmax row): {1 / total-ish scale
// applied to the unnormalised row, lse}. Two exps and a log, where
// normalising and then FoldSink take three and a log more.
struct SinkNorm {
  float inv;  // multiplies the unnormalised row (NaN: the row must be NaN)
  float lse;
};
inline SinkNorm NormalizeWithSink(float m, float l, float sink) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (std::isnan(sink) || sink == kInf) return {nan, nan};
  if (sink == -kInf) return {1.0f / l, m + std::log(l)};
  const float top = std::max(m, sink);
  const float keys = l * std::exp(m - top), total = keys + std::exp(sink - top);
  return {std::exp(m - top) / total, top + std::log(total)};
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_SINKS_H_

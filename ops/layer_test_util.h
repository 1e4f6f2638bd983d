// Test helpers for the layer: activations, and the layer written the slow
// way, one head at a time, to check the fast one against.
#ifndef ATTNKIT_OPS_LAYER_TEST_UTIL_H_
#define ATTNKIT_OPS_LAYER_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/config.pb.h"
#include "core/tensor.h"
#include "ops/multi_head_attention.h"

namespace attnkit {
namespace layer_test {

// [B, T, D] values uniform in [-1, 1].
std::vector<float> RandomActivations(int64_t B, int64_t T, int64_t D, uint64_t seed);
// A contiguous [B, T, D] f32 view of `data`.
TensorView ActivationView(const float* data, int64_t B, int64_t T, int64_t D);
// Tokens [t0, t0 + n) of every sequence of a contiguous [B, T, D] buffer.
TensorView TokenSlice(const float* data, int64_t B, int64_t T, int64_t D, int64_t t0, int64_t n);

// y [B, Tq, D] in double: for every (b, h), q_h = x Wq[h*d:(h+1)*d, :]^T
// (+ bq slice), k and v likewise from rows g*d.. of Wk, Wv with g = h / (H/G),
// softmax attention with the layer's mask and alignment, and y += o_h
// Wo[:, h*d:(h+1)*d]^T; then + bo. Keys and values come from `context`
// [B, Tk, D].
std::vector<double> SlowLayer(const MultiHeadAttention& layer, const float* x, int64_t B,
                              int64_t Tq, const float* context, int64_t Tk);

// The head-split bug: the projections [B*T, H*d] reshaped straight to
// [B, H, T, d] (reinterpreting memory) instead of viewed as [B, T, H, d].
// Returns y [B, T, D] from that wrong layer (self-attention).
std::vector<double> ReshapeBugLayer(const MultiHeadAttention& layer, const float* x, int64_t B,
                                    int64_t T);

// A config for the layer: D = H * d, the given mask, backend by name.
AttentionConfig LayerConfig(int64_t heads, int64_t kv_heads, int64_t head_dim, bool causal,
                            const std::string& backend);

// A backend that runs the reference and records the views of every call. In
// device mode it claims not to use host memory, so callers must stage data
// through Allocate/Upload/Download (host memory behind the scenes).
class SpyBackend : public Backend {
 public:
  explicit SpyBackend(bool device_mode);
  std::string Name() const override { return device_ ? "spy-device" : "spy"; }
  std::string Description() const override { return "reference that records its arguments"; }
  Capabilities Caps() const override { return reference_->Caps(); }
  bool UsesHostMemory() const override { return !device_; }
  const std::vector<AttentionArgs>& calls() const { return calls_; }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override;

 private:
  bool device_;
  std::unique_ptr<Backend> reference_;
  std::vector<AttentionArgs> calls_;
};

template <typename A, typename B>
double MaxAbsDiff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    m = std::max(m, diff < 0 ? -diff : diff);
  }
  return m;
}

}  // namespace layer_test
}  // namespace attnkit

#endif  // ATTNKIT_OPS_LAYER_TEST_UTIL_H_

// Adam with bias correction (Kingma & Ba, 2015) and optional decoupled weight
// decay (AdamW, Loshchilov & Hutter), over a fixed list of parameters. Per
// element, at step t = 1, 2, ...:
//   m = b1 m + (1 - b1) g        v = b2 v + (1 - b2) g^2
//   p -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
// where the wd term applies only to parameters with decay = true (matrices and
// embeddings; not biases or norm gains), as torch.optim.AdamW does. The
// gradients are read, never cleared: the layers' ZeroGradients() does that.
#ifndef ATTNKIT_OPS_ADAM_H_
#define ATTNKIT_OPS_ADAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ops/parameter.h"

namespace attnkit {

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; 0 = plain Adam
};

class Adam {
 public:
  // InvalidArgument naming the option and its rule: lr > 0, betas in [0, 1),
  // eps > 0, weight_decay >= 0 (all finite); or a parameter without storage.
  static absl::StatusOr<Adam> Create(std::vector<ParamRef> params, const AdamOptions& options);

  // One update of every parameter from its gradient.
  void Step();
  int64_t steps() const { return t_; }
  const AdamOptions& options() const { return options_; }
  const std::vector<ParamRef>& params() const { return params_; }
  int64_t NumParameters() const;

 private:
  Adam() = default;
  std::vector<ParamRef> params_;
  AdamOptions options_;
  std::vector<std::vector<float>> m_, v_;  // first and second moments, per parameter
  int64_t t_ = 0;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_ADAM_H_

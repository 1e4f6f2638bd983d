// A trainable tensor and its gradient, as the optimizer sees them: two f32
// arrays of the same size owned by a layer. Layers hand out ParamRefs; the
// optimizer updates `value` from `grad` and never allocates per parameter
// beyond its own moment buffers.
#ifndef ATTNKIT_OPS_PARAMETER_H_
#define ATTNKIT_OPS_PARAMETER_H_

#include <cstdint>
#include <string>

namespace attnkit {

struct ParamRef {
  std::string name;  // "block0.attn.wq", for reports
  float* value = nullptr;
  float* grad = nullptr;
  int64_t size = 0;
  // Weight decay applies (matrices, embeddings); off for biases and norm gains.
  bool decay = true;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_PARAMETER_H_

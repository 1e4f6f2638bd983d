#include "backends/reference/reference_backend.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/full_capabilities.h"
#include "core/ragged.h"
#include "core/status_macros.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace {

class ReferenceBackend : public Backend {
 public:
  explicit ReferenceBackend(std::string name) : name_(std::move(name)) {}

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return "scalar fp64 reference: the definition, row by row, for checking other backends";
  }
  Capabilities Caps() const override {
    Capabilities c = FullCapabilities();
    c.deterministic = true;  // one thread, a fixed loop order
    // The definition under FAST: Q rounded as core/fast_compute.h says, P not.
    c.fast_kv_dtypes = {DType::kF16, DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2};
    // Dense float K/V only: paged and int8 have no backward, ragged is not
    // done this round (ComputeReferenceBackward refuses all three).
    BackwardCapabilities& bwd = c.backward;
    bwd.supported = true;
    bwd.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    bwd.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    bwd.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    bwd.kv_lengths = bwd.blocked_mask = bwd.additive_bias = bwd.bias_grad = true;
    bwd.softcap = bwd.deterministic = bwd.sinks = bwd.alibi = bwd.value_head_dim = true;
    bwd.ragged = false;
    return c;
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    info->kernel = "scalar-fp64";
    if (p.is_ragged()) {  // each sequence is a dense batch-1 problem
      for (const SequenceCall& s : RaggedSequences(p, a)) {
        ATTNKIT_RETURN_IF_ERROR(ForwardImpl(s.problem, s.args, info));
      }
      return absl::OkStatus();
    }
    std::vector<double> scores(static_cast<size_t>(p.kv_len));
    std::vector<double> row(static_cast<size_t>(p.value_dim()));
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < p.q_len; ++i) {
          const double lse = ReferenceRow(p, a, b, h, i, &scores, row.data());
          for (int64_t c = 0; c < p.value_dim(); ++c) {
            StoreFromF32(a.o.data, a.o.dtype, a.o.Offset(b, h, i, c), static_cast<float>(row[c]));
          }
          if (p.return_lse) {
            static_cast<float*>(a.lse.data)[a.lse.Offset(b, h, i)] = static_cast<float>(lse);
          }
        }
      }
    }
    return absl::OkStatus();
  }

  // The fp64 closed form (oracle/reference_backward.h), each gradient rounded
  // once into its tensor's dtype at the view's offsets (any layout).
  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g,
                            RunInfo* info) override {
    info->kernel = "scalar-fp64";
    const ReferenceGradients r = ComputeReferenceBackward(p, a, g.d_o);
    if (r.dq.empty() && p.batch * p.num_heads * p.q_len * p.head_dim > 0) {
      return absl::UnimplementedError(absl::StrCat("the reference has no backward for ", p.Id(),
                                                   " (paged, ragged or int8 K/V)"));
    }
    // A [B, heads, T, d] canonical array into a view (d: E for dQ and dK,
    // Ev for dV).
    auto store = [](const std::vector<double>& from, const TensorView& to, int64_t heads,
                    int64_t tokens) {
      const int64_t d = to.shape[3];
      size_t x = 0;
      for (int64_t b = 0; b < to.shape[0]; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t t = 0; t < tokens; ++t)
            for (int64_t c = 0; c < d; ++c) {
              StoreFromF32(to.data, to.dtype, to.Offset(b, h, t, c), static_cast<float>(from[x++]));
            }
    };
    store(r.dq, g.dq, p.num_heads, p.q_len);
    store(r.dk, g.dk, p.num_kv_heads, p.kv_len);
    store(r.dv, g.dv, p.num_kv_heads, p.kv_len);
    if (!g.dbias.empty()) {
      size_t x = 0;
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.num_heads; ++h)
          for (int64_t i = 0; i < p.q_len; ++i)
            for (int64_t j = 0; j < p.kv_len; ++j) {
              static_cast<float*>(g.dbias.data)[g.dbias.Offset(b, h, i, j)] =
                  static_cast<float>(r.dbias[x++]);
            }
    }
    if (!g.dsinks.empty()) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        static_cast<float*>(g.dsinks.data)[g.dsinks.Offset(h)] = static_cast<float>(r.dsinks[h]);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> MakeReferenceBackend(const std::string& name) {
  return std::make_unique<ReferenceBackend>(name);
}

}  // namespace attnkit

#include "backends/reference/reference_backend.h"

#include <vector>

#include "core/full_capabilities.h"
#include "core/ragged.h"
#include "core/reference.h"
#include "core/status_macros.h"

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
    std::vector<double> row(static_cast<size_t>(p.head_dim));
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < p.q_len; ++i) {
          const double lse = ReferenceRow(p, a, b, h, i, &scores, row.data());
          for (int64_t c = 0; c < p.head_dim; ++c) {
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

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> MakeReferenceBackend(const std::string& name) {
  return std::make_unique<ReferenceBackend>(name);
}

}  // namespace attnkit

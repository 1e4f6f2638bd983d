// Running one problem on a backend from host data, whatever memory the
// backend uses: host backends run in place; device backends get buffers
// allocated once, inputs uploaded, outputs downloaded.
#ifndef ATTNKIT_HARNESS_EXECUTE_H_
#define ATTNKIT_HARNESS_EXECUTE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"

namespace attnkit {

// A problem's tensors placed in a backend's memory, reusable across calls.
class PlacedProblem {
 public:
  // Copies the inputs of `host` into memory owned by `backend` (a no-op
  // wrapper for host-memory backends, which then read `host` directly).
  static absl::StatusOr<PlacedProblem> Place(Backend* backend, const ProblemData& host);
  const AttentionArgs& args() const { return args_; }
  // Runs Forward (queued on the device; call Synchronize to wait).
  absl::Status Forward(const AttentionProblem& p, RunInfo* info);
  // Copies o (and lse) back into `host`'s output tensors.
  absl::Status DownloadOutputs(const ProblemData& host);

 private:
  Backend* backend_ = nullptr;
  AttentionArgs args_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;  // device copies, if any
  DeviceBuffer* o_buffer_ = nullptr;
  DeviceBuffer* lse_buffer_ = nullptr;
};

// Place + Forward + Synchronize + DownloadOutputs, writing into host.o/lse.
absl::Status RunOnBackend(Backend* backend, const AttentionProblem& p, const ProblemData& host,
                          RunInfo* info);

// Sets every element of the float outputs (o, lse) to NaN, so an element a
// backend forgets to write cannot pass for a result.
void PoisonOutputs(const ProblemData& data);
// Sets every element of o and lse to `value` (stored rounded in o's dtype).
void FillOutputs(const ProblemData& data, float value);

// Backward on `backend` from host data: host.q, k, v, o and lse (the
// forward's outputs, e.g. from RunOnBackend) and the optional inputs, plus
// grads.d_o; writes grads.dq, dk, dv (and dbias when it is allocated). A
// device backend gets every tensor uploaded into buffers of its own (the
// gradient buffers too, so poison put there by PoisonGradients is what it
// sees), runs Backward, synchronizes, and the gradients are downloaded.
absl::Status RunBackwardOnBackend(Backend* backend, const AttentionProblem& p,
                                  const ProblemData& host, const GradData& grads, RunInfo* info);

// Sets every element of dq, dk, dv (and dbias) to NaN: a backend must write
// each of them (zeros for keys no query sees and rows with no visible key).
void PoisonGradients(const GradData& grads);
// Sets every element of dq, dk, dv (and dbias) to `value`.
void FillGradients(const GradData& grads, float value);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_EXECUTE_H_

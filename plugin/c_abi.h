// Conversions between the plugin C ABI's structs (include/attnkit/plugin.h) and
// the C++ types of core/, used on both sides of the boundary: the host
// (plugin/plugin_table_backend.h) turns problems and tensors into C, a plugin built from
// this tree (plugin/backend_export.h) turns them back.
#ifndef ATTNKIT_PLUGIN_C_ABI_H_
#define ATTNKIT_PLUGIN_C_ABI_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnkit/plugin.h"
#include "attnkit/plugin_sdk.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

// The C view of `p`; its pointers (name, backend, kv_lengths) borrow from p.
attnkit_problem ProblemToC(const AttentionProblem& p);
// InvalidArgument naming the field when an enum value or count is out of
// range; the problem's own rules are checked later (ValidateProblem).
absl::StatusOr<AttentionProblem> ProblemFromC(const attnkit_problem& c);

attnkit_tensor TensorToC(const TensorView& t);
absl::StatusOr<TensorView> TensorFromC(const attnkit_tensor& c, const char* field);
attnkit_args ArgsToC(const AttentionArgs& a);
absl::StatusOr<AttentionArgs> ArgsFromC(const attnkit_args& c);

attnkit_grads GradsToC(const GradArgs& g);
absl::StatusOr<GradArgs> GradsFromC(const attnkit_grads& c);

// The C view of `caps`; head_dims borrows caps.head_dims.
attnkit_caps CapsToC(const Capabilities& caps);
Capabilities CapsFromC(const attnkit_caps& c);

// absl's code numbering is the ABI's; unknown codes become Unknown.
absl::Status StatusFromC(int32_t code, const char* message);
attnkit_sdk::Status StatusToSdk(const absl::Status& s);

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_C_ABI_H_

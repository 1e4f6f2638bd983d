// The "reference" backend: oracle/reference.h's fp64 row function behind the
// Backend interface. Slow by design; it supports everything a config can say.
// Its Backward is oracle/reference_backward.h's fp64 closed form, each gradient
// rounded once into its dtype: dense float K/V (no paged, int8 or ragged
// backward), every mask, padding, dense mask, bias with dBias and softcap.
#ifndef ATTNKIT_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
#define ATTNKIT_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace attnkit {

// The reference every speed-up is reported against.
inline constexpr char kReferenceBackendName[] = "reference";

// `name` lets the same code register twice: built in as "reference" and as
// the plugin "reference-plugin" that tests the dlopen route end to end.
std::unique_ptr<Backend> MakeReferenceBackend(const std::string& name = kReferenceBackendName);

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_

// What the C API's source files share (not installed, not part of the API):
// the context's definition and the guard that turns absl::Status and C++
// exceptions into a status code plus message.
#ifndef ATTNKIT_CAPI_INTERNAL_H_
#define ATTNKIT_CAPI_INTERNAL_H_

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "attnkit/attnkit.h"
#include "attnkit/plugin_sdk.h"
#include "core/backend.h"
#include "plugin/c_abi.h"
#include "plugin/registry.h"

struct attnkit_context {
  attnkit::BackendRegistry registry;
  // Capabilities per backend, so that attnkit_backend_info's head_dims
  // pointer stays valid as long as the context.
  std::vector<attnkit::Capabilities> caps;
};

namespace attnkit::capi {

inline void CopyString(const std::string& s, char* buf, size_t size) {
  attnkit_sdk::internal::CopyCString(s, buf, size);
}

// Runs fn (returning absl::Status) with no exception escaping: the SDK's
// guard, which plugins use too.
template <class Fn>
int32_t Guard(char* err, size_t err_size, Fn&& fn) {
  return attnkit_sdk::internal::Guard(err, err_size, [&] { return StatusToSdk(fn()); });
}

inline absl::Status RequireContext(const attnkit_context* ctx) {
  if (ctx == nullptr) return absl::InvalidArgumentError("ctx is NULL");
  return absl::OkStatus();
}

inline absl::Status RequireNonNull(const void* p, const char* what) {
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrFormat("%s is NULL", what));
  return absl::OkStatus();
}

inline absl::Status RequireStructSize(uint32_t size, size_t minimum, const char* what) {
  if (size < minimum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.struct_size (%u) is smaller than the %u bytes of its first fields; set it to "
        "sizeof(%s)",
        what, size, minimum, what));
  }
  return absl::OkStatus();
}

// One C struct of the API as this library was compiled: its sizeof and its
// fields as JSON (capi/struct_layout.cc, from the struct's field table).
struct StructLayout {
  const char* name;  // "attnkit_problem", ...
  size_t size;
  std::string json;
};
// The struct `name` (attnkit_struct_size's names), or nullptr.
const StructLayout* FindStructLayout(const char* name);

// A copy of `s` the caller frees with attnkit_string_free.
char* NewCString(const std::string& s);

}  // namespace attnkit::capi

#endif  // ATTNKIT_CAPI_INTERNAL_H_

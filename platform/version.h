// attnkit's version (the VERSION file) and the commit it was built from
// (Bazel's workspace status: tools/workspace_status.sh; "unknown" outside a
// git checkout, "-dirty" with uncommitted changes).
#ifndef ATTNKIT_PLATFORM_VERSION_H_
#define ATTNKIT_PLATFORM_VERSION_H_

namespace attnkit {

const char* AttnkitVersion();  // e.g. "0.24.0"
const char* AttnkitCommit();   // e.g. "f5a4837c0d1e" or "f5a4837c0d1e-dirty"

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_VERSION_H_

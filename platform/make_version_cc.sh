#!/usr/bin/env bash
# Writes platform/version.cc: make_version_cc.sh OUT VERSION_FILE STABLE_STATUS_FILE.
set -euo pipefail
version=$(tr -d '[:space:]' < "$2")
commit=$(sed -n 's/^STABLE_ATTNKIT_COMMIT //p' "$3")
cat > "$1" <<CC
#include "platform/version.h"

namespace attnkit {

const char* AttnkitVersion() { return "$version"; }
const char* AttnkitCommit() { return "${commit:-unknown}"; }

}  // namespace attnkit
CC

#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the commit attnkit reports
# with its version (`attnkit --version`, every JSON report). "-dirty" marks
# uncommitted changes; "unknown" outside a git checkout.
commit=$(git rev-parse --short=12 HEAD 2> /dev/null) || commit=unknown
if [[ $commit != unknown ]] && ! git diff --quiet HEAD -- 2> /dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_ATTNKIT_COMMIT $commit"

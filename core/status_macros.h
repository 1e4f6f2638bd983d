// Early-return helpers for absl::Status, which Debian's Abseil (20220623) lacks.
#ifndef ATTNKIT_CORE_STATUS_MACROS_H_
#define ATTNKIT_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ATTNKIT_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    const ::absl::Status attnkit_status_ = (expr);     \
    if (!attnkit_status_.ok()) return attnkit_status_; \
  } while (0)

#define ATTNKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define ATTNKIT_STATUS_CONCAT_(a, b) ATTNKIT_STATUS_CONCAT_INNER_(a, b)

// ATTNKIT_ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define ATTNKIT_ASSIGN_OR_RETURN(lhs, rexpr) \
  ATTNKIT_ASSIGN_OR_RETURN_IMPL_(ATTNKIT_STATUS_CONCAT_(attnkit_statusor_, __LINE__), lhs, rexpr)

#define ATTNKIT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return statusor.status();              \
  lhs = std::move(statusor).value()

#endif  // ATTNKIT_CORE_STATUS_MACROS_H_

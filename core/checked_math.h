// 64-bit size arithmetic that reports overflow as an error instead of wrapping.
#ifndef ATTNKIT_CORE_CHECKED_MATH_H_
#define ATTNKIT_CORE_CHECKED_MATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace attnkit {

// a * b for non-negative sizes; ResourceExhausted naming `what` on overflow.
inline absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s overflows 64 bits (%d * %d)", what, a, b));
  }
  return r;
}

inline absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, absl::string_view what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s overflows 64 bits (%d + %d)", what, a, b));
  }
  return r;
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_CHECKED_MATH_H_

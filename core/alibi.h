// ALiBi (config.proto alibi): the term a head's slope adds to score (i, j),
// -slope * |diag_i - j| with diag_i the key on query i's diagonal
// (core/mask.h Diagonal). Every backend takes it from here, in f32: the
// distance converts to f32 (exact below 2^24) and one multiply rounds, which
// the oracle's bound grants (oracle/compare.h). Usable from CUDA device code.
#ifndef ATTNKIT_CORE_ALIBI_H_
#define ATTNKIT_CORE_ALIBI_H_

#include <cstdint>

#include "core/mask.h"

namespace attnkit {

ATTNKIT_HOST_DEVICE inline float AlibiTerm(float slope, int64_t diag, int64_t j) {
  const int64_t distance = diag >= j ? diag - j : j - diag;
  return -(slope * static_cast<float>(distance));
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_ALIBI_H_

// ALiBi (config.proto alibi): the term a head's slope adds to score (i, j),
// -slope * |diag_i - j| with diag_i the key on query i's diagonal
// (core/mask.h Diagonal). Every backend takes it from here, in f32: the
// distance converts to f32 (exact below 2^24) and one multiply rounds, which
// the oracle's bound grants (oracle/compare.h). Usable from CUDA device code.
#ifndef ATTNKIT_CORE_ALIBI_H_
#define ATTNKIT_CORE_ALIBI_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/mask.h"

namespace attnkit {

ATTNKIT_HOST_DEVICE inline float AlibiTerm(float slope, int64_t diag, int64_t j) {
  const int64_t distance = diag >= j ? diag - j : j - diag;
  return -(slope * static_cast<float>(distance));
}

// True when every term of `slope` over distances up to `max_distance` is
// finite and each distance exact in f32 (below 2^24): vector code may then
// add the terms without AlibiTerm's per-element NaN rule.
inline bool AlibiTermsAreFinite(float slope, int64_t max_distance) {
  return std::isfinite(slope) && max_distance < (int64_t{1} << 24) &&
         std::fabs(slope) * static_cast<float>(max_distance) < 1e37f;
}

// The slopes of the ALiBi paper (and BLOOM's build_alibi_tensor) for
// `heads` heads: for n a power of two, 2^(-8 i / n), i = 1..n; otherwise
// those of the largest power of two n below, then every other slope of 2n.
inline std::vector<float> DefaultAlibiSlopes(int64_t heads) {
  std::vector<float> slopes;
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  for (int64_t i = 1; i <= n; ++i) slopes.push_back(std::exp2(-8.0f * i / n));
  for (int64_t i = 1; static_cast<int64_t>(slopes.size()) < heads; i += 2) {
    slopes.push_back(std::exp2(-8.0f * i / (2 * n)));
  }
  return slopes;
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_ALIBI_H_

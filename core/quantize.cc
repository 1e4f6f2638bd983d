#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit {

float QuantizeRowI8(const float* x, int64_t n, int8_t* out) {
  float max_abs = 0.0f;
  bool finite = true;
  for (int64_t c = 0; c < n; ++c) {
    finite = finite && std::isfinite(x[c]);
    max_abs = std::max(max_abs, std::fabs(x[c]));
  }
  if (!finite) {
    for (int64_t c = 0; c < n; ++c) out[c] = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (max_abs == 0.0f) {
    for (int64_t c = 0; c < n; ++c) out[c] = 0;
    return 0.0f;
  }
  const float scale = max_abs / 127.0f;
  const float inv = 127.0f / max_abs;
  for (int64_t c = 0; c < n; ++c) {
    const float q = std::nearbyint(x[c] * inv);
    out[c] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q)));
  }
  return scale;
}

float QuantizeRowFp8(const float* x, int64_t n, Fp8Format format, uint8_t* out) {
  float max_abs = 0.0f;
  bool finite = true;
  for (int64_t c = 0; c < n; ++c) {
    finite = finite && std::isfinite(x[c]);
    max_abs = std::max(max_abs, std::fabs(x[c]));
  }
  if (!finite || max_abs == 0.0f) {
    for (int64_t c = 0; c < n; ++c) out[c] = 0;
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = max_abs / Fp8Max(format);
  for (int64_t c = 0; c < n; ++c) out[c] = EncodeFp8(x[c] / scale, format);
  return scale;
}

}  // namespace attnkit

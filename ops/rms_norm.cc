#include "ops/rms_norm.h"

#include <cmath>

namespace attnkit {

void RmsNormForward(const float* x, const float* gain, int64_t m, int64_t d, float eps, float* y,
                    float* inv_rms) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    inv_rms[r] = inv;
    float* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] = gain[i] * xr[i] * inv;
  }
}

void RmsNormBackward(const float* dy, const float* x, const float* inv_rms, const float* gain,
                     int64_t m, int64_t d, float* dx, float* dgain) {
  for (int64_t r = 0; r < m; ++r) {
    const float* g = dy + r * d;
    const float* xr = x + r * d;
    const float inv = inv_rms[r];
    double ux = 0;  // (g * dy) . x
    for (int64_t i = 0; i < d; ++i) ux += double(gain[i]) * g[i] * xr[i];
    const float c = static_cast<float>(ux * inv * inv * inv / d);
    float* out = dx + r * d;
    for (int64_t i = 0; i < d; ++i) {
      out[i] += inv * gain[i] * g[i] - xr[i] * c;
      dgain[i] += g[i] * xr[i] * inv;
    }
  }
}

}  // namespace attnkit

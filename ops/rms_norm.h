// RMSNorm over the last dim and its backward pass, for the trainable layers:
//   y[r, :] = g * x[r, :] * inv[r],   inv[r] = 1 / sqrt(mean(x[r, :]^2) + eps)
// on M rows of D contiguous floats.
#ifndef ATTNKIT_OPS_RMS_NORM_H_
#define ATTNKIT_OPS_RMS_NORM_H_

#include <cstdint>

namespace attnkit {

// y [M, D] from x [M, D] and gain [D]; inv_rms [M] keeps inv[r] for the
// backward pass. y may be x.
void RmsNormForward(const float* x, const float* gain, int64_t m, int64_t d, float eps, float* y,
                    float* inv_rms);

// With u = g * dy: dx[r, :] += inv * u - x * inv^3 * (u . x) / D, and
// dgain += sum_r dy * x * inv. dx is added to (a residual branch's gradient
// is already there); dx may not alias x or dy.
void RmsNormBackward(const float* dy, const float* x, const float* inv_rms, const float* gain,
                     int64_t m, int64_t d, float* dx, float* dgain);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_RMS_NORM_H_

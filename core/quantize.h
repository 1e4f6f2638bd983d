// Symmetric int8 quantization of K/V rows: one f32 scale per (token, KV
// head) row of d values, value = int8 * scale. The KV cache quantizes as it
// appends (ops/kv_cache.h); random problem data is drawn in f32 and
// quantized the same way; the kernels dequantize in registers.
#ifndef ATTNKIT_CORE_QUANTIZE_H_
#define ATTNKIT_CORE_QUANTIZE_H_

#include <cstdint>

#include "core/fp8.h"

namespace attnkit {

// out[c] = round(x[c] / scale), scale = max_c |x[c]| / 127, so every value
// is in [-127, 127] and the largest magnitude maps to +-127. An all-zero row
// gets scale 0. A non-finite x gives a NaN scale (the row then dequantizes
// to NaN, as a float row holding it would poison attention). Returns scale.
float QuantizeRowI8(const float* x, int64_t n, int8_t* out);

// fp8 K/V rows (core/fp8.h): out[c] = EncodeFp8(x[c] / scale), scale =
// max_c |x[c]| / Fp8Max(format), so the largest magnitude maps to the
// format's largest finite value (as vLLM's per-token scales). The same rules
// for zero and non-finite rows as QuantizeRowI8. Returns scale.
float QuantizeRowFp8(const float* x, int64_t n, Fp8Format format, uint8_t* out);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_QUANTIZE_H_

// A backend plugin built the way an outside author would build one, with
// another compiler and C++ standard library than the host (clang-14 and
// libc++, tests/BUILD), against nothing of attnkit but the SDK headers
// (include/attnkit/plugin_sdk.h, include/attnkit/plugin.h) and the header-only mask rules
// (core/mask.h). The backend suites load it into the g++/libstdc++ host and
// hold it to the fp64 reference like every other backend.
//
// "libcxx-naive": direct attention in double precision over f32, f16 or bf16
// tensors of any strides (both layouts; half and bfloat16 converted by hand),
// every mask and alignment, GQA, kv_lengths, dense blocked mask, additive bias,
// softcap and LSE, following the NaN/Inf rule of oracle/reference.h. Its
// internals use libc++'s std::vector and std::string on purpose: none of them
// crosses the C table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/plugin_sdk.h"
#include "core/mask.h"

namespace {

using attnkit_sdk::Status;

// IEEE half and bfloat16 by hand: the plugin shares no code with attnkit.
float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float f = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -f : f;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even.
uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (x < 0x38800000u) {  // below 2^-14: a multiple of 2^-24
    const float units = std::nearbyint(BitsToFloat(x) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  uint32_t h = (x >> 13) - (112u << 10);  // exponent rebased from 127 to 15
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

int64_t Offset(const attnkit_tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

float Load(const attnkit_tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t at = Offset(t, i0, i1, i2, i3);
  switch (t.dtype) {
    case ATTNKIT_F16:
      return HalfToFloat(static_cast<const uint16_t*>(t.data)[at]);
    case ATTNKIT_BF16:
      return BitsToFloat(static_cast<uint32_t>(static_cast<const uint16_t*>(t.data)[at]) << 16);
    default:
      return static_cast<const float*>(t.data)[at];
  }
}

void Store(const attnkit_tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float x) {
  const int64_t at = Offset(t, i0, i1, i2, i3);
  switch (t.dtype) {
    case ATTNKIT_F16:
      static_cast<uint16_t*>(t.data)[at] = FloatToHalf(x);
      break;
    case ATTNKIT_BF16:
      static_cast<uint16_t*>(t.data)[at] = FloatToBf16(x);
      break;
    default:
      static_cast<float*>(t.data)[at] = x;
  }
}

class NaiveBackend : public attnkit_sdk::PluginBackend {
 public:
  const char* Name() override { return name_.c_str(); }
  const char* Description() override { return description_.c_str(); }

  void Capabilities(attnkit_caps* caps) override {
    caps->dtypes = caps->kv_dtypes =
        (1u << ATTNKIT_F32) | (1u << ATTNKIT_F16) | (1u << ATTNKIT_BF16);
    caps->masks = (1u << ATTNKIT_MASK_NONE) | (1u << ATTNKIT_MASK_CAUSAL) |
                  (1u << ATTNKIT_MASK_SLIDING_WINDOW);
    caps->alignments = (1u << ATTNKIT_ALIGN_TOP_LEFT) | (1u << ATTNKIT_ALIGN_BOTTOM_RIGHT);
    caps->layouts = (1u << ATTNKIT_LAYOUT_BHTD) | (1u << ATTNKIT_LAYOUT_BTHD);
    caps->min_head_dim = 1;
    caps->max_head_dim = 1024;
    caps->lse = caps->kv_lengths = caps->blocked_mask = caps->additive_bias = caps->softcap = 1;
    caps->deterministic = 1;
  }

  Status Forward(const attnkit_problem& p, const attnkit_args& a, attnkit_run_info* info) override {
    attnkit::MaskParams mask;
    mask.q_len = p.q_len;
    mask.bottom_right = p.alignment == ATTNKIT_ALIGN_BOTTOM_RIGHT;
    if (p.mask == ATTNKIT_MASK_CAUSAL) {
      mask.right = 0;
    } else if (p.mask == ATTNKIT_MASK_SLIDING_WINDOW) {
      mask.left = p.window_left;
      mask.right = p.window_right;
    }
    const int64_t group = p.num_heads / p.num_kv_heads;
    std::vector<double> acc(static_cast<size_t>(p.head_dim));
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t kv_length = p.num_kv_lengths > 0 ? p.kv_lengths[b] : p.kv_len;
      for (int64_t h = 0; h < p.num_heads; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < p.q_len; ++i) {
          const attnkit::KeyRange keys = attnkit::VisibleKeys(mask, i, kv_length);
          double max = -std::numeric_limits<double>::infinity(), sum = 0;
          bool bad = false;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = keys.begin; j < keys.end; ++j) {
            if (a.blocked_mask.data != nullptr &&
                static_cast<const uint8_t*>(
                    a.blocked_mask
                        .data)[b * a.blocked_mask.strides[0] + h * a.blocked_mask.strides[1] +
                               i * a.blocked_mask.strides[2] + j * a.blocked_mask.strides[3]] !=
                    0) {
              continue;
            }
            const double bias = a.bias.data != nullptr ? Load(a.bias, b, h, i, j) : 0.0;
            if (bias == -std::numeric_limits<double>::infinity()) continue;  // blocks the pair
            double s = 0;
            for (int64_t c = 0; c < p.head_dim; ++c) {
              s += double(Load(a.q, b, h, i, c)) * Load(a.k, b, g, j, c);
            }
            s *= p.scale;
            bad = bad || !std::isfinite(s) || !(bias < std::numeric_limits<double>::infinity());
            if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
            s += bias;
            bool v_bad = false;
            for (int64_t c = 0; c < p.head_dim; ++c) {
              v_bad = v_bad || !std::isfinite(Load(a.v, b, g, j, c));
            }
            bad = bad || v_bad;
            if (bad) continue;  // the row is NaN whatever else it reads
            const double m = std::max(max, s);
            const double alpha = std::exp(max - m), w = std::exp(s - m);
            sum = sum * alpha + w;
            for (int64_t c = 0; c < p.head_dim; ++c) {
              acc[c] = acc[c] * alpha + w * Load(a.v, b, g, j, c);
            }
            max = m;
          }
          const double nan = std::numeric_limits<double>::quiet_NaN();
          for (int64_t c = 0; c < p.head_dim; ++c) {
            Store(a.o, b, h, i, c, static_cast<float>(bad ? nan : (sum > 0 ? acc[c] / sum : 0)));
          }
          if (p.return_lse) {
            float* lse = static_cast<float*>(a.lse.data);
            lse[b * a.lse.strides[0] + h * a.lse.strides[1] + i * a.lse.strides[2]] =
                static_cast<float>(bad ? nan
                                       : (sum > 0 ? max + std::log(sum)
                                                  : -std::numeric_limits<double>::infinity()));
          }
        }
      }
    }
    std::snprintf(info->kernel, sizeof(info->kernel), "naive-f64 (%s)", compiler_.c_str());
    return Status{};
  }

 private:
  const std::string name_ = "libcxx-naive";
  const std::string description_ =
      "direct fp64-accumulated attention from a plugin built with clang and "
      "libc++ (ABI test)";
#if defined(__clang__) && defined(_LIBCPP_VERSION)
  const std::string compiler_ =
      "clang " __clang_version__ ", libc++ " + std::to_string(_LIBCPP_VERSION);
#else
  const std::string compiler_ = "not clang with libc++";
#endif
};

std::unique_ptr<attnkit_sdk::PluginBackend> Create(uint32_t index) {
  if (index != 0) return nullptr;
  return std::make_unique<NaiveBackend>();
}

}  // namespace

ATTNKIT_EXPORT_PLUGIN("libcxx-naive", 1, Create)

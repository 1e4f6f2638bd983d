#include "tests/conformance_grid.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace attnkit {
namespace {

struct Shape {
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim;
};

// Sizes: T in {1, 2, 7, 33, 129, 257, 1000}, decode (Tq = 1) over Tk up to
// 5000 (every split-K path), Tq < Tk and Tq > Tk, head dims 16..256 with 80
// and 96, group sizes 1, 2, 3, 4, 5, 6, 7, 8 and MQA. Windows are Tk/4 + 1
// wide, so wider than one tile from Tk = 257 on.
constexpr Shape kShapes[] = {
    {1, 1, 1, 1, 1, 16},        // the smallest problem
    {1, 2, 2, 2, 2, 32},        // MHA, T = 2
    {2, 4, 2, 7, 7, 64},        // GQA 2, batch 2
    {1, 4, 1, 33, 33, 80},      // MQA, d = 80
    {1, 8, 2, 1, 129, 96},      // decode-like, GQA 4, d = 96
    {1, 10, 2, 7, 33, 128},     // GQA 5, Tq < Tk
    {1, 8, 1, 33, 7, 64},       // MQA (group 8), Tq > Tk
    {2, 6, 2, 129, 257, 16},    // GQA 3
    {1, 32, 8, 129, 257, 80},   // the GQA 32/8 example shape
    {1, 7, 1, 2, 33, 48},       // MQA with 7 heads
    {1, 12, 2, 33, 129, 256},   // GQA 6, d = 256
    {3, 16, 2, 1, 1000, 64},    // GQA 8 decode over a long cache, batch 3
    {1, 2, 1, 1000, 1000, 32},  // long prefill, MQA
    {1, 4, 4, 257, 129, 24},    // Tq > Tk with an odd head dim
    {1, 14, 2, 5, 200, 64},     // GQA 7
    {1, 8, 2, 1, 5000, 128},    // decode over a 5000-key cache: split-K
    {2, 16, 4, 1, 2049, 64},    // decode, GQA 4, batch 2, Tk just past a power of two
};

// One feature combination applied to a shape.
struct Variant {
  MaskKind mask;
  Alignment alignment;
  bool window = false;  // with kSlidingWindow: left = Tk/4 + 1, right per below
  int64_t window_right = 0;
  bool padding = false;
  bool dense = false;
  bool bias = false;
  bool softcap = false;
  bool custom_scale = false;
  Layout layout = Layout::kBHTD;
};

const Variant kVariants[] = {
    {MaskKind::kNone, Alignment::kBottomRight},
    {MaskKind::kCausal, Alignment::kTopLeft},
    {MaskKind::kCausal, Alignment::kBottomRight},
    {MaskKind::kSlidingWindow, Alignment::kBottomRight, true, 0},
    {MaskKind::kSlidingWindow, Alignment::kTopLeft, true, 3},
    {MaskKind::kCausal, Alignment::kBottomRight, false, 0, true},
    {MaskKind::kNone, Alignment::kBottomRight, false, 0, true, true},
    {MaskKind::kCausal, Alignment::kTopLeft, false, 0, false, false, true, true, true},
    {MaskKind::kNone, Alignment::kBottomRight, false, 0, false, false, false, false, false,
     Layout::kBTHD},
    {MaskKind::kSlidingWindow, Alignment::kBottomRight, true, 2, true, true, true, false, false,
     Layout::kBTHD},
};

bool IsLarge(const Shape& s) { return double(s.heads) * s.q_len * s.kv_len * s.head_dim > 4e6; }

}  // namespace

std::vector<AttentionProblem> ConformanceGrid() {
  std::vector<AttentionProblem> grid;
  std::set<std::string> ids;
  uint64_t seed = 1;
  int shape_index = 0;
  for (const Shape& s : kShapes) {
    ++shape_index;
    int variant_index = 0;
    for (const Variant& v : kVariants) {
      ++variant_index;
      // Large shapes run f32 and one 16-bit type (alternating); small ones all three,
      // plus f32 queries over a bf16 KV cache.
      std::vector<std::pair<DType, DType>> dtypes;
      if (IsLarge(s)) {
        dtypes = {{DType::kF32, DType::kF32},
                  (variant_index % 2 == 0) ? std::make_pair(DType::kF16, DType::kF16)
                                           : std::make_pair(DType::kBF16, DType::kBF16)};
      } else {
        dtypes = {
            {DType::kF32, DType::kF32}, {DType::kF16, DType::kF16}, {DType::kBF16, DType::kBF16}};
        if (variant_index % 3 == 0) dtypes.push_back({DType::kF32, DType::kBF16});
        if (variant_index % 5 == 0) dtypes.push_back({DType::kF32, DType::kF16});
      }
      for (const auto& [dtype, kv_dtype] : dtypes) {
        AttentionProblem p;
        p.batch = s.batch;
        p.num_heads = s.heads;
        p.num_kv_heads = s.kv_heads;
        p.head_dim = s.head_dim;
        p.model_dim = s.heads * s.head_dim;
        p.q_len = s.q_len;
        p.kv_len = s.kv_len;
        p.dtype = dtype;
        p.kv_dtype = kv_dtype;
        p.layout = v.layout;
        p.mask = v.mask;
        p.alignment = v.alignment;
        if (v.window) {
          p.window_left = s.kv_len / 4 + 1;
          p.window_right = v.window_right;
        }
        p.scale = v.custom_scale ? 0.3f : static_cast<float>(1.0 / std::sqrt(double(s.head_dim)));
        p.softcap = v.softcap ? 1.5f : 0.0f;
        if (v.padding) {
          // Lengths cover 0 (an empty sequence), short, and full.
          for (int64_t b = 0; b < s.batch; ++b) {
            const int64_t choices[] = {s.kv_len / 2 + 1, 0, s.kv_len};
            p.kv_lengths.push_back(s.batch == 1 ? (s.kv_len + 1) / 2 : choices[b % 3]);
          }
        }
        p.blocked_mask = v.dense;
        p.additive_bias = v.bias;
        // The LSE in every variant: it is an output every backend must get right.
        p.return_lse = true;
        p.seed = seed++;
        p.name = p.Id();
        if (!ids.insert(p.name).second) p.name = absl::StrCat(p.name, "_v", variant_index);
        grid.push_back(p);
      }
    }
  }
  return grid;
}

}  // namespace attnkit

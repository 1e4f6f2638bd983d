#include "harness/poison_blocked.h"

#include <limits>
#include <random>
#include <vector>

namespace attnkit {
namespace {

class Poison {
 public:
  explicit Poison(uint64_t seed) : rng_(seed) {}
  float Next() {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    static constexpr float kValues[] = {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf};
    return kValues[rng_() % 3];
  }

 private:
  std::mt19937_64 rng_;
};

bool Blocked(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
             int64_t j) {
  const KeyRange r = VisibleKeys(p.mask_params(), i, p.KvLength(b));
  if (j < r.begin || j >= r.end) return true;
  return p.blocked_mask &&
         static_cast<const uint8_t*>(a.blocked_mask.data)[a.blocked_mask.Offset(b, h, i, j)] != 0;
}

void PoisonRow(const TensorView& t, int64_t b, int64_t head, int64_t row, int64_t d,
               Poison* poison) {
  for (int64_t c = 0; c < d; ++c) {
    StoreFromF32(t.data, t.dtype, t.Offset(b, head, row, c), poison->Next());
  }
}

}  // namespace

void PoisonBlockedInputs(const AttentionProblem& p, const AttentionArgs& a, uint64_t seed) {
  Poison poison(seed);
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads;
  const int64_t Tq = p.q_len, Tk = p.kv_len, d = p.head_dim;
  const MaskParams m = p.mask_params();
  for (int64_t b = 0; b < B; ++b) {
    // seen[g * Tk + j]: some query of some head of kv head g sees key j.
    std::vector<char> seen(static_cast<size_t>(G * Tk), 0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = p.KvHead(h);
      for (int64_t i = 0; i < Tq; ++i) {
        const KeyRange r = VisibleKeys(m, i, p.KvLength(b));
        bool sees_any = false;
        for (int64_t j = r.begin; j < r.end; ++j) {
          if (Blocked(p, a, b, h, i, j)) continue;
          seen[g * Tk + j] = 1;
          sees_any = true;
        }
        if (!sees_any) PoisonRow(a.q, b, h, i, d, &poison);
        if (p.additive_bias) {
          auto* bias = static_cast<float*>(a.bias.data);
          for (int64_t j = 0; j < Tk; ++j) {
            if (Blocked(p, a, b, h, i, j)) bias[a.bias.Offset(b, h, i, j)] = poison.Next();
          }
        }
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t j = 0; j < Tk; ++j) {
        if (seen[g * Tk + j]) continue;
        PoisonRow(a.k, b, g, j, d, &poison);
        PoisonRow(a.v, b, g, j, p.value_dim(), &poison);
      }
    }
  }
}

void PoisonRandomInputs(const AttentionProblem& p, const AttentionArgs& a, int64_t count,
                        uint64_t seed) {
  Poison poison(seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<const TensorView*> targets = {&a.q, &a.k, &a.v};
  if (p.additive_bias) targets.push_back(&a.bias);
  if (p.sinks) targets.push_back(&a.sinks);         // NaN, +inf: the head's rows NaN; -inf: none
  if (p.alibi) targets.push_back(&a.alibi_slopes);  // the head's rows that see a key NaN
  for (int64_t n = 0; n < count; ++n) {
    const TensorView& t = *targets[rng() % targets.size()];
    // A uniform element of the tensor (rank 4, or 1 for sinks), through its strides.
    int64_t offset = 0;
    for (int axis = 0; axis < t.rank; ++axis) {
      offset += static_cast<int64_t>(rng() % static_cast<uint64_t>(t.dim(axis))) * t.strides[axis];
    }
    StoreFromF32(t.data, t.dtype, offset, poison.Next());
  }
}

}  // namespace attnkit

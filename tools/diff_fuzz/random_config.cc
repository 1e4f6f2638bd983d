#include "tools/diff_fuzz/random_config.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace attnkit {
namespace {

template <typename T>
T Pick(std::mt19937_64& rng, const std::vector<T>& items) {
  return items[rng() % items.size()];
}

bool Chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

DTypeProto RandomDType(std::mt19937_64& rng) { return Pick<DTypeProto>(rng, {F32, F16, BF16}); }

// A length in [0, max] favouring the edges 0 and max.
int64_t EdgyLength(std::mt19937_64& rng, int64_t max) {
  return Chance(rng, 0.25) ? 0 : Chance(rng, 0.25) ? max : int64_t(rng() % (max + 1));
}

// Serving features on top of a drawn config: int8 or fp8 K/V, paged K/V (any page
// size; pools with room for every sequence, with spare pages, or too small
// so that sequences share pages) and ragged batches (q_lengths with empty
// sequences; they need kv_lengths, BTHD and no dense mask or bias). NaN
// placement (poison_blocked, nonfinite_inputs) draws into dense float K/V
// only, so a config with any of these drops it.
void AddServingFeatures(std::mt19937_64& rng, AttentionConfig* c) {
  const bool int8 = Chance(rng, 0.2), paged = Chance(rng, 0.25), ragged = Chance(rng, 0.25);
  if (!int8 && !paged && !ragged) return;
  c->set_poison_blocked(false);
  c->set_nonfinite_inputs(0);
  if (int8) {
    // int8, or (drawn from the seed, so the draws above stay as they were)
    // fp8 E4M3 or E5M2 one time in three each.
    const DTypeProto kScaled[] = {INT8, FP8_E4M3, FP8_E5M2};
    c->set_kv_dtype(kScaled[std::mt19937_64(c->seed() ^ 0xbf58476d1ce4e5b9ull)() % 3]);
  }
  if (ragged) {
    c->set_layout(BTHD);
    c->set_blocked_mask(false);
    c->set_additive_bias(false);
    if (c->kv_lengths_size() == 0) {
      for (int64_t b = 0; b < c->batch(); ++b) c->add_kv_lengths(EdgyLength(rng, c->kv_len()));
    }
    int64_t total_k = 0;
    for (int64_t len : c->kv_lengths()) total_k += len;
    // ValidateProblem wants at least one query, and one key unless paged.
    if (total_k == 0 && !paged) c->set_kv_lengths(rng() % c->batch(), 1 + rng() % c->kv_len());
    // Decode steps (1 query) next to prefill chunks and empty sequences.
    int64_t total_q = 0;
    for (int64_t b = 0; b < c->batch(); ++b) {
      c->add_q_lengths(Chance(rng, 0.3) ? 1 : EdgyLength(rng, c->q_len()));
      total_q += c->q_lengths(b);
    }
    if (total_q == 0) c->set_q_lengths(rng() % c->batch(), 1);
  }
  if (paged) {
    const int64_t page = Pick<int64_t>(rng, {16, 32, 64, 128, 256});
    c->set_page_size(page);
    int64_t needed = 0;
    for (int64_t b = 0; b < c->batch(); ++b) {
      const int64_t len = c->kv_lengths_size() > 0 ? c->kv_lengths(b) : c->kv_len();
      needed += (len + page - 1) / page;
    }
    // Unset (batch * max_pages), too few (shared pages) or a few spare.
    switch (rng() % 3) {
      case 0:
        break;
      case 1:
        c->set_num_pages(1 + int64_t(rng() % std::max<int64_t>(1, needed)));
        break;
      default:
        c->set_num_pages(needed + 1 + int64_t(rng() % 4));
    }
  }
}

}  // namespace

AttentionConfig RandomConfig(std::mt19937_64& rng, double max_work) {
  // Lengths around tile and vector edges (1, 2^k - 1, 2^k, 2^k + 1).
  const std::vector<int64_t> kLens = {1,  2,  3,  4,  5,  7,  8,  9,   15, 16,
                                      17, 31, 32, 33, 63, 64, 65, 100, 129};
  const std::vector<int64_t> kHeadDims = {1,  2,  3,  4,  7,  8,  15,  16, 17,
                                          32, 33, 48, 64, 80, 96, 128, 256};
  AttentionConfig c;
  for (;;) {
    c.Clear();
    // Up to 8 KV heads, group sizes (GQA ratios) 1 to 8.
    const int64_t kv_heads = Chance(rng, 0.6) ? 1 + rng() % 3 : 1 + rng() % 8;
    c.set_num_kv_heads(kv_heads);
    c.set_num_heads(kv_heads * Pick<int64_t>(rng, {1, 1, 2, 3, 4, 5, 6, 7, 8}));
    c.set_head_dim(Pick(rng, kHeadDims));
    c.set_batch(1 + rng() % 3);
    c.set_q_len(Pick(rng, kLens));
    c.set_kv_len(Chance(rng, 0.3) ? c.q_len() : Pick(rng, kLens));
    // Long caches (decode-like when q_len is small): every split-K path.
    if (Chance(rng, 0.2)) c.set_kv_len(Pick<int64_t>(rng, {255, 257, 1000, 2049, 4097, 5000}));
    const double work = double(c.batch()) * c.num_heads() * c.q_len() * c.kv_len() * c.head_dim();
    if (work <= max_work) break;
  }
  switch (rng() % 3) {
    case 0:
      c.mutable_mask()->set_kind(MaskSpec::NONE);
      break;
    case 1:
      c.mutable_mask()->set_kind(MaskSpec::CAUSAL);
      break;
    default:
      c.mutable_mask()->set_kind(MaskSpec::SLIDING_WINDOW);
      // Narrow windows, and windows up to 300 keys (wider than a tile).
      c.mutable_mask()->set_window_left(Chance(rng, 0.5) ? rng() % 9 : rng() % 301);
      c.mutable_mask()->set_window_right(rng() % 4);
  }
  c.set_alignment(Chance(rng, 0.5) ? TOP_LEFT : BOTTOM_RIGHT);
  if (Chance(rng, 0.4)) {
    for (int64_t b = 0; b < c.batch(); ++b) {
      // Zero-length and full sequences are the edges; favour them.
      const int64_t len = Chance(rng, 0.25)   ? 0
                          : Chance(rng, 0.25) ? c.kv_len()
                                              : int64_t(rng() % (c.kv_len() + 1));
      c.add_kv_lengths(len);
    }
  }
  c.set_blocked_mask(Chance(rng, 0.25));
  c.set_additive_bias(Chance(rng, 0.25));
  if (Chance(rng, 0.2)) c.set_softcap(Pick<float>(rng, {1.0f, 5.0f, 30.0f, 50.0f}));
  c.set_return_lse(Chance(rng, 0.5));
  c.set_dtype(RandomDType(rng));
  c.set_kv_dtype(Chance(rng, 0.7) ? c.dtype() : RandomDType(rng));
  c.set_layout(Chance(rng, 0.5) ? BHTD : BTHD);
  if (Chance(rng, 0.3)) c.set_scale(std::uniform_real_distribution<float>(0.05f, 2.0f)(rng));
  c.set_poison_blocked(Chance(rng, 0.7));
  c.set_seed(rng() % 1000000);
  // NaN / Inf anywhere in the inputs: exactly the rows that read one give NaN.
  if (Chance(rng, 0.3)) c.set_nonfinite_inputs(1 + static_cast<int32_t>(rng() % 4));
  AddServingFeatures(rng, &c);
  // FAST where it can round something (16-bit, int8 or fp8 K/V), about one
  // time in three. Drawn from the config's seed rather than `rng`, so the
  // other draws, and the problems every earlier seed gave, stay as they were.
  if (c.kv_dtype() != F32 && !c.backward() &&
      std::mt19937_64(c.seed() ^ 0x9e3779b97f4a7c15ull)() % 3 == 0) {
    c.set_compute(FAST);
  }
  // Attention sinks one time in four, drawn from the seed too.
  if (std::mt19937_64(c.seed() ^ 0x5bd1e9955bd1e995ull)() % 4 == 0) {
    c.set_sinks(true);
  }
  // ALiBi one time in four, independently.
  if (std::mt19937_64(c.seed() ^ 0x2545f4914f6cdd1dull)() % 4 == 0) {
    c.set_alibi(true);
  }
  // A value head dim of its own (MLA) one time in four: smaller or larger
  // than head_dim, around vector edges, within twice the work drawn above.
  std::mt19937_64 value_rng(c.seed() ^ 0x94d049bb133111ebull);
  if (value_rng() % 4 == 0) {
    const std::vector<int64_t> kValueDims = {1, 3, 8, 16, 17, 24, 40, 64, 96, 128, 200};
    const int64_t dv = kValueDims[value_rng() % kValueDims.size()];
    const double pairs = double(c.batch()) * c.num_heads() * c.q_len() * c.kv_len();
    if (pairs * double(dv) <= 2 * max_work) c.set_value_head_dim(dv);
  }
  return c;
}

}  // namespace attnkit

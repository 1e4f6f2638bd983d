#include "tests/conformance_grid.h"

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

// The serving family: paged K/V, ragged batches and int8 K/V, in the shapes
// an inference server runs (decode steps and short prefill chunks over KV
// caches of ragged lengths). Masks are bottom-right aligned throughout (a
// KV cache's diagonal).
using DTypePairs = std::vector<std::pair<DType, DType>>;  // (Q/O, K/V)

struct ServingCase {
  const char* tag;  // appended to Id(), which omits lengths and pool size
  Shape shape;
  std::vector<int64_t> kv_lengths;  // empty: every sequence has kv_len keys
  std::vector<int64_t> q_lengths;   // non-empty: a ragged batch (BTHD)
  int64_t page_size = 0;            // 0: dense (or packed) K/V
  int64_t num_pages = 0;            // 0: batch * max_pages, room for all
  MaskKind mask = MaskKind::kNone;
  int64_t window_left = 0;  // with kSlidingWindow (right 0)
  Layout layout = Layout::kBHTD;
  DTypePairs dtypes;

  ServingCase& Keys(std::vector<int64_t> lengths) {
    kv_lengths = std::move(lengths);
    return *this;
  }
  ServingCase& Ragged(std::vector<int64_t> queries, std::vector<int64_t> keys) {
    q_lengths = std::move(queries);
    kv_lengths = std::move(keys);
    layout = Layout::kBTHD;
    return *this;
  }
  ServingCase& Paged(int64_t page, int64_t pages = 0) {
    page_size = page;
    num_pages = pages;
    return *this;
  }
  ServingCase& Causal() {
    mask = MaskKind::kCausal;
    return *this;
  }
  ServingCase& Window(int64_t left) {
    mask = MaskKind::kSlidingWindow;
    window_left = left;
    return *this;
  }
  ServingCase& TokenMajor() {
    layout = Layout::kBTHD;
    return *this;
  }
  ServingCase& Types(DTypePairs pairs) {
    dtypes = std::move(pairs);
    return *this;
  }
};

ServingCase Serve(const char* tag, Shape shape) { return ServingCase{tag, shape}; }

std::vector<ServingCase> ServingCases() {
  constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16, kI8 = DType::kI8;
  // A mixed serving batch: one prefill chunk of 64 queries over 264 keys,
  // single-token decodes over 1000, 1 and 513 keys, a sequence with keys but
  // no queries, and one with a query but no keys (fully blocked).
  const std::vector<int64_t> kMixQ = {64, 1, 1, 0, 1, 1};
  const std::vector<int64_t> kMixK = {264, 1000, 1, 37, 0, 513};
  // Shapes: {batch, heads, kv_heads, q_len (max), kv_len (max), head_dim}.
  const Shape kMix = {6, 8, 2, 64, 1000, 64};
  const Shape kDecodes = {4, 4, 1, 1, 999, 128};
  const std::vector<int64_t> kDecodesQ = {1, 1, 1, 1}, kDecodesK = {1, 999, 0, 250};
  return {
      // Paged decode (Tq = 1) over ragged cache lengths: every page size.
      Serve("decode", {3, 8, 2, 1, 300, 64})
          .Keys({300, 17, 129})
          .Paged(16)
          .Types({{kF32, kF32}, {kBF16, kBF16}, {kF16, kF16}}),
      Serve("decode", {4, 4, 1, 1, 1000, 80})
          .Keys({1000, 1, 513, 64})
          .Paged(32)
          .Causal()
          .TokenMajor()
          .Types({{kF32, kF32}, {kBF16, kBF16}, {kF32, kBF16}}),
      Serve("decode", {2, 8, 2, 1, 2049, 128})
          .Keys({2049, 700})
          .Paged(64)
          .Causal()
          .Types({{kF32, kF32}, {kF16, kF16}}),
      Serve("decode", {2, 16, 4, 1, 513, 64})
          .Keys({513, 128})
          .Paged(128)
          .Causal()
          .TokenMajor()
          .Types({{kF32, kF32}, {kBF16, kBF16}}),
      Serve("decode", {1, 8, 2, 1, 5000, 128}).Paged(256).Types({{kF32, kF32}}),
      // Every sequence full, the last page partly filled; MQA with 8 heads.
      Serve("full", {2, 8, 1, 1, 77, 80}).Paged(16).TokenMajor().Types({{kF32, kF32}}),
      // Shared pages: 42 pages needed, 20 in the pool (a common prefix).
      Serve("shared", {4, 8, 2, 1, 200, 64})
          .Keys({200, 200, 150, 90})
          .Paged(16, 20)
          .Causal()
          .Types({{kF32, kF32}, {kBF16, kBF16}}),
      // Short prefill chunks (Tq > 1, causal bottom-right) over pages.
      Serve("prefill", {2, 8, 2, 16, 129, 64})
          .Keys({129, 40})
          .Paged(16)
          .Causal()
          .Types({{kF32, kF32}, {kBF16, kBF16}}),
      Serve("prefill_shared", {3, 4, 1, 7, 100, 80})
          .Keys({100, 64, 33})
          .Paged(32, 5)
          .Causal()
          .TokenMajor()
          .Types({{kF32, kF32}, {kF16, kF16}}),
      Serve("prefill", {1, 4, 4, 33, 257, 128}).Paged(64).Window(64).Types({{kF32, kF32}}),
      Serve("prefill_shared", {2, 8, 2, 12, 90, 80})
          .Keys({90, 90})
          .Paged(16, 8)
          .Window(20)
          .Types({{kF32, kF32}}),
      // Ragged mixed batches over packed K/V, each mask.
      Serve("mix", kMix).Ragged(kMixQ, kMixK).Types({{kF32, kF32}, {kBF16, kBF16}}),
      Serve("mix", kMix)
          .Ragged(kMixQ, kMixK)
          .Causal()
          .Types({{kF32, kF32}, {kF16, kF16}, {kF32, kBF16}}),
      Serve("mix", kMix).Ragged(kMixQ, kMixK).Window(128).Types({{kF32, kF32}, {kBF16, kBF16}}),
      // The same batches over paged K/V (with pages shared in one).
      Serve("mix", kMix)
          .Ragged(kMixQ, kMixK)
          .Paged(16)
          .Causal()
          .Types({{kF32, kF32}, {kBF16, kBF16}}),
      Serve("mix_shared", kMix).Ragged(kMixQ, kMixK).Paged(64, 20).Causal().Types({{kF32, kF32}}),
      Serve("mix", kMix).Ragged(kMixQ, kMixK).Paged(32).Window(128).Types({{kF16, kF16}}),
      // Pure decode (MQA, d 128) and chunked prefill (d 80) ragged batches.
      Serve("decodes", kDecodes)
          .Ragged(kDecodesQ, kDecodesK)
          .Causal()
          .Types({{kF32, kF32}, {kBF16, kBF16}}),
      Serve("decodes", kDecodes)
          .Ragged(kDecodesQ, kDecodesK)
          .Paged(256)
          .Causal()
          .Types({{kF32, kF32}}),
      Serve("chunks", {3, 8, 2, 33, 100, 80})
          .Ragged({33, 7, 0}, {33, 100, 5})
          .Causal()
          .Types({{kF32, kF32}, {kF16, kF16}}),
      // int8 K/V, dense: decode and prefill, Q in each float type.
      Serve("decode", {2, 8, 2, 1, 257, 64})
          .Keys({257, 100})
          .Types({{kF32, kI8}, {kBF16, kI8}, {kF16, kI8}}),
      Serve("prefill", {1, 4, 1, 33, 33, 128})
          .Causal()
          .TokenMajor()
          .Types({{kF32, kI8}, {kBF16, kI8}}),
      Serve("prefill", {2, 8, 2, 7, 129, 80}).Causal().Types({{kF16, kI8}}),
      Serve("decode", {1, 8, 2, 1, 4097, 128}).Types({{kF32, kI8}}),
      // int8 K/V, paged: decodes over up to 3000 keys, shared prefill pages.
      Serve("decode", {3, 8, 2, 1, 1000, 64})
          .Keys({1000, 333, 0})
          .Paged(16)
          .Causal()
          .Types({{kF32, kI8}, {kBF16, kI8}, {kF16, kI8}}),
      Serve("prefill_shared", {2, 8, 2, 9, 96, 128})
          .Keys({96, 70})
          .Paged(32, 4)
          .Causal()
          .TokenMajor()
          .Types({{kF32, kI8}, {kBF16, kI8}}),
      Serve("decode", {2, 4, 1, 1, 3000, 80})
          .Keys({3000, 1200})
          .Paged(256)
          .Causal()
          .Types({{kF32, kI8}}),
      // int8 K/V, ragged: packed and paged.
      Serve("mix", kMix)
          .Ragged(kMixQ, kMixK)
          .Causal()
          .Types({{kF32, kI8}, {kBF16, kI8}, {kF16, kI8}}),
      Serve("mix", kMix)
          .Ragged(kMixQ, kMixK)
          .Paged(64)
          .Window(128)
          .Types({{kF32, kI8}, {kF16, kI8}}),
      Serve("decodes", {4, 4, 1, 1, 999, 80})
          .Ragged(kDecodesQ, kDecodesK)
          .Paged(32)
          .Types({{kBF16, kI8}}),
      Serve("decodes", {4, 4, 1, 1, 999, 64})
          .Ragged(kDecodesQ, kDecodesK)
          .Causal()
          .Types({{kF16, kI8}}),
  };
}

void AppendServingCases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                        uint64_t* seed) {
  for (const ServingCase& c : ServingCases()) {
    const Shape& s = c.shape;
    for (const auto& [dtype, kv_dtype] : c.dtypes) {
      AttentionProblem p =
          BasicProblem(s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim);
      p.dtype = dtype;
      p.kv_dtype = kv_dtype;
      p.layout = c.layout;
      p.mask = c.mask;
      p.alignment = Alignment::kBottomRight;
      if (c.mask == MaskKind::kSlidingWindow) p.window_left = c.window_left;
      p.kv_lengths = c.kv_lengths;
      p.q_lengths = c.q_lengths;
      p.page_size = c.page_size;
      if (c.page_size > 0) {
        p.num_pages = c.num_pages > 0 ? c.num_pages : s.batch * p.max_pages();
      }
      p.return_lse = true;
      p.seed = (*seed)++;
      p.name = absl::StrCat(p.Id(), "_", c.tag);
      for (int n = 2; !ids->insert(p.name).second; ++n) {
        p.name = absl::StrCat(p.Id(), "_", c.tag, n);
      }
      grid->push_back(p);
    }
  }
}

// NaN and Inf at random input elements (config.proto nonfinite_inputs): the
// rows that read one must come out NaN, the others as without them. Each
// case has both kinds of row (conformance_test checks), so a backend runs
// it twice, from NaN-poisoned and from finite-filled outputs
// (harness/checked_run.h), and a row it leaves unwritten fails.
void AppendNonFiniteCases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                          uint64_t* seed) {
  struct Case {
    Shape shape;
    DType dtype, kv_dtype;
    MaskKind mask;
    bool extras;    // sliding window, bias and softcap (or a dense mask in decode)
    int64_t count;  // values drawn: in decode one poisons every head of its KV group
  };
  const Case cases[] = {
      {{1, 4, 2, 33, 33, 64}, DType::kF32, DType::kF32, MaskKind::kCausal, false, 4},
      {{2, 6, 2, 129, 257, 16}, DType::kF16, DType::kF16, MaskKind::kSlidingWindow, true, 4},
      {{1, 8, 2, 1, 5000, 128}, DType::kBF16, DType::kBF16, MaskKind::kNone, false, 1},  // split-K
      {{2, 4, 1, 1, 300, 64}, DType::kF32, DType::kBF16, MaskKind::kNone, true, 1},
      // All-bf16 causal prefill over several query tiles (small enough for
      // its FAST twin): FAST reads V as pairs prepared once per call, and the
      // tiles the diagonal cuts find V's non-finite rows in those pairs.
      {{1, 2, 1, 120, 120, 64}, DType::kBF16, DType::kBF16, MaskKind::kCausal, false, 6},
  };
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    AttentionProblem p = BasicProblem(s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim);
    p.dtype = c.dtype;
    p.kv_dtype = c.kv_dtype;
    p.mask = c.mask;
    p.alignment = Alignment::kBottomRight;
    if (c.mask == MaskKind::kSlidingWindow) p.window_left = s.kv_len / 4 + 1;
    if (c.extras && c.mask == MaskKind::kSlidingWindow) {
      p.additive_bias = true;
      p.softcap = 1.5f;
    } else if (c.extras) {
      p.blocked_mask = true;
    }
    p.nonfinite_inputs = c.count;
    p.return_lse = true;
    p.seed = (*seed)++;
    p.name = absl::StrCat(p.Id(), "_nonfinite");
    if (ids->insert(p.name).second) grid->push_back(p);
  }
}

// The serving layout every variant meets (a ragged batch of a prefill chunk
// and two decode rows over paged int8 K/V, one sequence without keys), and
// a causal problem with NaN and Inf among its inputs.
// Appends `p` with the LSE on, the next seed and its id as its name, unless
// a case of that id is in the grid already: the variant groups' one way in.
void AddVariantCase(AttentionProblem p, std::vector<AttentionProblem>* grid,
                    std::set<std::string>* ids, uint64_t* seed) {
  p.return_lse = true;
  p.seed = (*seed)++;
  p.name = p.Id();
  if (ids->insert(p.name).second) grid->push_back(std::move(p));
}

AttentionProblem ServingCase() {
  AttentionProblem p = BasicProblem(3, 8, 2, 5, 600, 64);
  p.kv_dtype = DType::kI8;
  p.layout = Layout::kBTHD;
  p.alignment = Alignment::kBottomRight;
  p.mask = MaskKind::kCausal;
  p.q_lengths = {5, 1, 1};
  p.kv_lengths = {100, 600, 0};
  p.page_size = 16;
  p.num_pages = 3 * p.max_pages();
  return p;
}
AttentionProblem PoisonedCausalCase() {
  AttentionProblem p = BasicProblem(1, 4, 2, 33, 33, 64);
  p.alignment = Alignment::kBottomRight;
  p.mask = MaskKind::kCausal;
  p.nonfinite_inputs = 4;
  return p;
}

// Attention sinks (config.proto sinks), on each path that finishes a row:
// gpt-oss's shape (GQA, d 64, a sliding window over a causal prefill), a
// split-K decode (the sink folded in after the merge), padding with an empty
// sequence (rows that see no key: 0 and an lse of the sink), a ragged paged
// int8 batch, and NaN/Inf inputs, sinks among them.
void AppendSinkCases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                     uint64_t* seed) {
  auto add = [&](AttentionProblem p) {
    p.sinks = true;
    p.alignment = Alignment::kBottomRight;
    AddVariantCase(std::move(p), grid, ids, seed);
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    AttentionProblem p = BasicProblem(1, 8, 2, 129, 129, 64);
    p.dtype = p.kv_dtype = t;
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 32;
    add(p);
    p.mask = MaskKind::kCausal;
    p.window_left = 0;
    add(p);
  }
  AttentionProblem decode = BasicProblem(1, 8, 2, 1, 5000, 128);
  decode.kv_dtype = DType::kBF16;
  add(decode);
  AttentionProblem padded = BasicProblem(3, 4, 2, 17, 65, 32);
  padded.dtype = padded.kv_dtype = DType::kF16;
  padded.mask = MaskKind::kCausal;
  padded.kv_lengths = {33, 0, 65};
  add(padded);
  add(ServingCase());
  add(PoisonedCausalCase());
}

// ALiBi (config.proto alibi): both alignments with keys on both sides of the
// diagonal, with softcap and a bias (the term comes after the cap), padding,
// a long decode (terms in the thousands), serving layouts and poisoned slopes.
void AppendAlibiCases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                      uint64_t* seed) {
  auto add = [&](AttentionProblem p) {
    p.alibi = true;
    AddVariantCase(std::move(p), grid, ids, seed);
  };
  for (Alignment al : {Alignment::kBottomRight, Alignment::kTopLeft}) {
    AttentionProblem p = BasicProblem(2, 4, 2, 40, 97, 64);
    p.alignment = al;
    add(p);
  }
  AttentionProblem capped = BasicProblem(1, 8, 8, 129, 129, 64);
  capped.dtype = capped.kv_dtype = DType::kBF16;
  capped.alignment = Alignment::kBottomRight;
  capped.mask = MaskKind::kCausal;
  capped.softcap = 20.0f;
  capped.additive_bias = true;
  add(capped);
  AttentionProblem window = BasicProblem(1, 8, 2, 64, 300, 32);
  window.alignment = Alignment::kBottomRight;
  window.mask = MaskKind::kSlidingWindow;
  window.window_left = 50;
  window.window_right = 10;
  window.kv_lengths = {250};
  add(window);
  AttentionProblem decode = BasicProblem(2, 8, 1, 1, 4100, 128);
  decode.alignment = Alignment::kBottomRight;
  decode.kv_dtype = DType::kF16;
  decode.kv_lengths = {4100, 1000};
  add(decode);
  add(ServingCase());
  add(PoisonedCausalCase());
}

// A value head dim of its own (config.proto value_head_dim, Ev != E) on
// every path that reads V or writes O: direct decode tiles (f32, bf16,
// int8; rows read from storage, Ev a multiple of the vector), split-K
// decode, MLA's MQA 576 / 512 shape (wide tiles), prefill with softcap, a
// window, padding, a dense mask and a bias, dims off the vector width on
// either side, Ev = 1, the serving layout and NaN/Inf inputs.
void AppendValueDimCases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                         uint64_t* seed) {
  auto add = [&](AttentionProblem p, int64_t dv) {
    p.value_head_dim = dv;
    AddVariantCase(std::move(p), grid, ids, seed);
  };
  for (DType kv : {DType::kF32, DType::kBF16, DType::kI8}) {
    AttentionProblem decode = BasicProblem(2, 4, 4, 1, 300, 64);
    decode.kv_dtype = kv;
    add(decode, 128);
  }
  AttentionProblem split = BasicProblem(1, 4, 1, 1, 5000, 96);
  split.kv_dtype = DType::kBF16;
  add(split, 64);
  AttentionProblem mla = BasicProblem(1, 16, 1, 2, 257, 576);
  mla.dtype = mla.kv_dtype = DType::kBF16;
  mla.alignment = Alignment::kBottomRight;
  mla.mask = MaskKind::kCausal;
  add(mla, 512);
  // MLA at decode: an item's rows are the group's heads alone, up to 128 of
  // them above 256 dims (highway's tiling.cc), one item per head and
  // sequence (so V is converted a tile at a time, not prepared); two
  // sequences, split over K.
  AttentionProblem mla_decode = BasicProblem(2, 128, 1, 1, 200, 576);
  mla_decode.dtype = mla_decode.kv_dtype = DType::kBF16;
  mla_decode.alignment = Alignment::kBottomRight;
  mla_decode.mask = MaskKind::kCausal;
  add(mla_decode, 512);
  AttentionProblem prefill = BasicProblem(1, 4, 2, 65, 65, 48);
  prefill.dtype = prefill.kv_dtype = DType::kF16;
  prefill.mask = MaskKind::kCausal;
  prefill.softcap = 2.0f;
  add(prefill, 80);
  AttentionProblem masked = BasicProblem(2, 4, 2, 33, 70, 32);
  masked.alignment = Alignment::kBottomRight;
  masked.mask = MaskKind::kSlidingWindow;
  masked.window_left = 20;
  masked.window_right = 3;
  masked.kv_lengths = {50, 0};
  masked.blocked_mask = masked.additive_bias = true;
  add(masked, 24);
  AttentionProblem odd = BasicProblem(1, 3, 3, 17, 40, 64);
  odd.layout = Layout::kBTHD;
  add(odd, 20);
  odd.head_dim = 20;
  odd.scale = 0.2f;
  add(odd, 64);
  add(odd, 1);
  AttentionProblem serving = ServingCase();
  add(serving, 32);
  add(PoisonedCausalCase(), 40);
}

// fp8 K/V (config.proto FP8_E4M3, FP8_E5M2; a scale per row): decode over a
// long cache (split-K) with padding, a causal GQA prefill with softcap, a
// window over BTHD, MLA's dims, and the serving layout (ragged, paged), in
// both formats.
void AppendFp8Cases(std::vector<AttentionProblem>* grid, std::set<std::string>* ids,
                    uint64_t* seed) {
  auto add = [&](AttentionProblem p) { AddVariantCase(std::move(p), grid, ids, seed); };
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    AttentionProblem decode = BasicProblem(2, 8, 2, 1, 3000, 128);
    decode.kv_dtype = kv;
    decode.kv_lengths = {3000, 700};
    add(decode);
    AttentionProblem prefill = BasicProblem(1, 8, 2, 70, 70, 64);
    prefill.dtype = DType::kBF16;
    prefill.kv_dtype = kv;
    prefill.mask = MaskKind::kCausal;
    prefill.softcap = 3.0f;
    add(prefill);
    AttentionProblem window = BasicProblem(1, 4, 4, 33, 90, 40);
    window.kv_dtype = kv;
    window.layout = Layout::kBTHD;
    window.alignment = Alignment::kBottomRight;
    window.mask = MaskKind::kSlidingWindow;
    window.window_left = 25;
    add(window);
    AttentionProblem mla = BasicProblem(1, 16, 1, 1, 300, 576);
    mla.kv_dtype = kv;
    mla.value_head_dim = 512;
    add(mla);
    AttentionProblem serving = ServingCase();
    serving.kv_dtype = kv;
    add(serving);
  }
}

// FAST twins (compute FAST, same inputs) of the problems with 16-bit, int8 or fp8
// K/V, where FAST may round: every one that mixes types (Q f32 over a 16-bit
// cache, any Q over int8, where rounding Q changes it) and every decode
// step; of the all-16-bit ones the smaller (B * H * Tq * Tk * d <= 2e6),
// which keeps the suite's time within a fifth more.
void AppendFastTwins(std::vector<AttentionProblem>* grid, std::set<std::string>* ids) {
  const size_t exact_cases = grid->size();
  for (size_t i = 0; i < exact_cases; ++i) {
    AttentionProblem p = (*grid)[i];
    if (p.kv_dtype == DType::kF32) continue;
    const double work = double(p.batch) * p.num_heads * p.q_len * p.kv_len * p.head_dim;
    if (p.dtype == p.kv_dtype && p.q_len > 1 && work > 2e6) continue;
    p.compute = ComputeMode::kFast;
    p.name = absl::StrCat(p.name, "_fast");
    if (ids->insert(p.name).second) grid->push_back(std::move(p));
  }
}

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
  AppendServingCases(&grid, &ids, &seed);
  AppendNonFiniteCases(&grid, &ids, &seed);
  AppendSinkCases(&grid, &ids, &seed);
  AppendAlibiCases(&grid, &ids, &seed);
  AppendValueDimCases(&grid, &ids, &seed);
  AppendFp8Cases(&grid, &ids, &seed);
  AppendFastTwins(&grid, &ids);
  return grid;
}

}  // namespace attnkit

// AttentionProblem: a validated attention problem, the form every backend
// consumes. It is made from an AttentionConfig (the user's text) by
// ProblemFromConfig, which checks every field and names the one that is wrong.
#ifndef ATTNKIT_CORE_PROBLEM_H_
#define ATTNKIT_CORE_PROBLEM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/mask.h"
#include "core/tensor.h"

namespace attnkit {

// Default ceiling on the bytes of one problem's tensors (config.proto).
constexpr int64_t kDefaultMemoryBudgetBytes = int64_t{16} << 30;
// Most NaN/Inf values random inputs may carry (config.proto nonfinite_inputs).
constexpr int64_t kMaxNonfiniteInputs = 64;

// Paged K/V page sizes (config.proto page_size): powers of two in this range.
constexpr int64_t kMinPageSize = 16;
constexpr int64_t kMaxPageSize = 256;

enum class MaskKind { kNone, kCausal, kSlidingWindow };
enum class Alignment { kTopLeft, kBottomRight };
// How a backend may compute (config.proto compute). kExact: every product is
// of exactly widened storage values, sums in f32. kFast: additionally Q may be
// rounded to K's storage type before Q.K (core/fast_compute.h gives the
// rounding) and P to V's before P.V; in the backward pass of an all-bf16
// problem P and dX may be rounded to bf16 before dV, dK and dQ
// (FastRoundsGradOperands). kFast is a permission, not an order.
enum class ComputeMode { kExact, kFast };

absl::string_view MaskKindName(MaskKind kind);     // "none", "causal", "window"
absl::string_view AlignmentName(Alignment a);      // "tl", "br"
absl::string_view ComputeModeName(ComputeMode m);  // "exact", "fast"

struct AttentionProblem {
  std::string name;
  int64_t batch = 1;
  int64_t num_heads = 1;         // H
  int64_t num_kv_heads = 1;      // G; H % G == 0
  int64_t head_dim = 1;          // d
  int64_t model_dim = 1;         // D, for the layer in ops/
  int64_t q_len = 1;             // Tq
  int64_t kv_len = 1;            // Tk
  DType dtype = DType::kF32;     // Q and O storage
  DType kv_dtype = DType::kF32;  // K and V storage
  Layout layout = Layout::kBHTD;
  MaskKind mask = MaskKind::kNone;
  int64_t window_left = 0;  // only for kSlidingWindow
  int64_t window_right = 0;
  Alignment alignment = Alignment::kTopLeft;
  float scale = 1.0f;
  float softcap = 0.0f;             // 0 = off
  std::vector<int64_t> kv_lengths;  // empty, or one per batch entry
  bool blocked_mask = false;
  bool additive_bias = false;
  bool return_lse = false;
  std::string backend = "auto";
  uint64_t seed = 0;
  bool poison_blocked = false;   // see config.proto
  int64_t nonfinite_inputs = 0;  // see config.proto
  int64_t memory_budget_bytes = kDefaultMemoryBudgetBytes;
  // Paged K/V (config.proto page_size): K and V are pools [num_pages,
  // page_size, G, d] read through a block table [B, max_pages()]. 0 = dense.
  int64_t page_size = 0;
  int64_t num_pages = 0;
  // Ragged batch (config.proto q_lengths): sequence b has q_lengths[b]
  // queries (<= q_len) and kv_lengths[b] keys (<= kv_len); Q, O and (unless
  // paged) K, V are packed token-major. Empty = every sequence has q_len.
  std::vector<int64_t> q_lengths;
  // A training step (config.proto backward): the forward then Backward.
  // Needs return_lse and dense float K/V.
  bool backward = false;
  // config.proto compute: EXACT (the default) or FAST.
  ComputeMode compute = ComputeMode::kExact;
  // Attention sinks (config.proto sinks): AttentionArgs::sinks holds one
  // logit per query head that joins each row's softmax denominator.
  bool sinks = false;
  // ALiBi (config.proto alibi): AttentionArgs::alibi_slopes holds one slope
  // per query head; core/alibi.h gives the term it adds to a score.
  bool alibi = false;
  // Ev, the head dim of V and O (config.proto value_head_dim); 0 = head_dim.
  // Read it through value_dim().
  int64_t value_head_dim = 0;
  bool fast() const { return compute == ComputeMode::kFast; }

  int64_t group_size() const { return num_heads / num_kv_heads; }  // H / G
  // Ev: the head dim of V, O, dO and dV (head_dim unless value_head_dim says).
  int64_t value_dim() const { return value_head_dim > 0 ? value_head_dim : head_dim; }
  // True when V and O have a head dim of their own (Ev != E, MLA).
  bool has_value_dim() const { return value_dim() != head_dim; }
  // The query heads h with KvHead(h) == g share key/value head g.
  int64_t KvHead(int64_t h) const { return h / group_size(); }
  bool has_kv_lengths() const { return !kv_lengths.empty(); }
  int64_t KvLength(int64_t b) const { return kv_lengths.empty() ? kv_len : kv_lengths[b]; }
  bool is_paged() const { return page_size > 0; }
  bool is_ragged() const { return !q_lengths.empty(); }
  // Block table entries per sequence: ceil(kv_len / page_size); 0 if dense.
  int64_t max_pages() const { return page_size > 0 ? (kv_len + page_size - 1) / page_size : 0; }
  int64_t QLength(int64_t b) const { return q_lengths.empty() ? q_len : q_lengths[b]; }
  // Query rows per head over the batch: sum of QLength(b).
  int64_t TotalQ() const;
  // Rows of the packed K and V of a ragged batch: sum of KvLength(b).
  int64_t TotalK() const;
  // The mask of sequence b (its own query count sets the bottom-right
  // diagonal in a ragged batch); mask_params() is sequence 0's.
  MaskParams mask_params(int64_t b) const;
  MaskParams mask_params() const { return mask_params(0); }
  // "mha", "mqa" or "gqa".
  absl::string_view Variant() const;
  // A short readable id: "gqa_h32_g8_q129_k257_d80_causal_br_f32".
  std::string Id() const;
};

// A valid problem with the given sizes and every option at its default (no
// mask, f32, BHTD, scale 1/sqrt(head_dim), model_dim = heads * head_dim).
AttentionProblem BasicProblem(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                              int64_t kv_len, int64_t head_dim);

// Checks a problem built in code (the same rules as ProblemFromConfig, in
// core/problem_config.h). Errors are InvalidArgument naming the field, its
// value and the rule, e.g. "num_heads (12) must be a multiple of
// num_kv_heads (5)".
absl::Status ValidateProblem(const AttentionProblem& p);

// The rule a backward pass adds to a FAST problem, whether or not it says
// `backward` (ValidateProblem applies it then; every Backend::Backward
// through ValidateGradArgs): dtype equal to kv_dtype, since FAST would round
// Q to K's type, a step with no gradient.
absl::Status ValidateFastBackward(const AttentionProblem& p);

// Limits ValidateProblem enforces on the head count and head dim.
constexpr int64_t kProblemMaxHeads = 65536;
constexpr int64_t kProblemMaxHeadDim = 1024;
// InvalidArgument "<field> (<value>) must be in [lo, hi]" outside the range.
absl::Status RequireRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi);

// Bytes of every tensor the problem needs (Q, K, V, O and the optional LSE,
// kv_lengths, mask, bias, block table, offsets and int8 scales), computed
// with overflow checks. A paged problem counts its whole pool.
absl::StatusOr<int64_t> ProblemBytes(const AttentionProblem& p);
// The K and V bytes a forward pass must read: for each sequence, every key
// row some query of it sees, K and V of every KV head (int8 with their f32
// scales). Pages shared between sequences count once per sequence. The
// memory traffic of decode figures.
int64_t KvBytesRead(const AttentionProblem& p);
// ResourceExhausted when ProblemBytes(p) exceeds p.memory_budget_bytes.
absl::Status CheckMemoryBudget(const AttentionProblem& p);

// Number of (query, key) pairs the structured mask and padding leave visible,
// summed over batch and heads: the basis of the useful-FLOP count.
int64_t CountVisiblePairs(const AttentionProblem& p);
// Useful FLOPs: 2 * (E + Ev) * visible pairs (Q.K^T over E and P.V over Ev,
// multiply + add each); 4 * d when Ev = E = d.
double UsefulFlops(const AttentionProblem& p);
// Useful FLOPs of the backward pass (FlashAttention's convention: the five
// matrix products, QK^T recomputed, dQ and dK over E, dP = dO V^T and dV over
// Ev): 2 * (3E + 2Ev) * visible pairs, 2.5x the forward's when Ev = E.
double UsefulBackwardFlops(const AttentionProblem& p);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_PROBLEM_H_

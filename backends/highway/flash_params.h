// The Highway backend's private parameters: a validated problem and its
// tensor views turned into what the kernels consume (no Highway types here,
// so plain C++ can build them and every target can read them).
#ifndef ATTNKIT_BACKENDS_HIGHWAY_FLASH_PARAMS_H_
#define ATTNKIT_BACKENDS_HIGHWAY_FLASH_PARAMS_H_

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/kv_rows.h"
#include "core/mask.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

struct FlashParams {
  int64_t batch = 1;
  int64_t num_heads = 1;     // H
  int64_t num_kv_heads = 1;  // G
  int64_t group = 1;         // H / G query heads per kv head
  int64_t head_dim = 1;      // d (E): Q and K
  int64_t value_dim = 1;     // Ev: V and O (AttentionProblem::value_dim())
  int64_t q_len = 1;         // Tq
  int64_t kv_len = 1;        // Tk
  // q: [B, H, Tq, d], o: [B, H, Tq, Ev]; k: [B, G, Tk, d], v: [B, G, Tk, Ev]
  // or paged pools (strided views, never copied). K/V row t of (b, g) is at kv_rows.Offset(k, b, g,
  // t); rows of one run (a page, or all of a dense tensor) are k_row_stride / v_row_stride elements
  // apart.
  TensorView q, k, v, o;
  KvRows kv_rows;
  int64_t k_row_stride = 0, v_row_stride = 0;
  // int8 and fp8 K/V: one f32 scale per row, at kv_rows.ScaleOffset(view, b,
  // g, t) (int8() is true for both: the rows are read times their scales).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  TensorView k_scale_view, v_scale_view;
  float* lse = nullptr;  // [B, H, Tq] f32 when requested
  TensorView lse_view;
  const uint8_t* blocked = nullptr;  // [B, H, Tq, Tk], 1 = blocked
  TensorView blocked_view;
  const float* bias = nullptr;  // [B, H, Tq, Tk], added to scores
  TensorView bias_view;
  const float* sinks = nullptr;  // [H] sink logits (core/sinks.h), or null
  TensorView sinks_view;
  const float* alibi_slopes = nullptr;  // [H] ALiBi slopes (core/alibi.h), or null
  TensorView alibi_view;
  // Every ALiBi term is finite (finite slopes whose products with the
  // longest distance stay in range): AddAlibi adds them to whole tiles with
  // vector code. Otherwise the scalar per-pair code applies the NaN rules.
  bool alibi_vector = false;
  const int64_t* kv_lengths = nullptr;  // [B] or null (all Tk)
  MaskParams mask;
  float scale = 1.0f;
  float softcap = 0.0f;  // 0 = off
  // FAST (config.proto compute; core/fast_compute.h): Q rows are rounded to
  // K's storage type before Q.K (round_q: bf16, f16 or i8 K), and P may be
  // rounded to V's before P.V (fast).
  bool round_q = false;
  bool fast = false;
  // V prepared once per call for the bf16 dot-product tiles (sdpa-inl.h,
  // PrepareValues), or null: per (b, g), rows t of V at prepared_v +
  // (b * G + g) * prepared_stride + t * prepared_ld as f32 (EXACT), or key
  // pairs t / 2 as bf16 pairs (FAST, prepared_ld = dvp).
  const float* prepared_v = nullptr;
  int64_t prepared_stride = 0;
  int64_t prepared_ld = 0;

  int64_t KvLength(int64_t b) const { return kv_lengths ? kv_lengths[b] : kv_len; }
  bool int8() const { return k_scale != nullptr; }
  // Inputs per (head, query, key) pair, applied by scalar code (masking-inl.h).
  bool per_pair() const { return bias != nullptr || blocked != nullptr || alibi_scalar(); }
  bool alibi_scalar() const { return alibi_slopes != nullptr && !alibi_vector; }
  // What the scalar code adds to a score after softcap: the bias and the
  // ALiBi term.
  bool adds_to_scores() const { return bias != nullptr || alibi_scalar(); }
  float AlibiSlope(int64_t h) const { return alibi_slopes[alibi_view.Offset(h)]; }
};

// `p` and `a` must have passed ValidateArgs; `p` must not be ragged (pass
// the problems of RaggedSequences). `p` must outlive the result (kv_lengths
// points into it).
FlashParams MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a);

// What one Forward ran, filled by the per-target code.
struct FlashRunInfo {
  int64_t target = 0;    // HWY_* bit of the target that ran
  int64_t q_rows = 0;    // query rows (heads x positions) per item
  int64_t key_tile = 0;  // keys per tile
  int score_rows = 0;    // QK^T micro-kernel: rows x keys per register tile
  int score_keys = 0;
  int value_rows = 0;  // PV micro-kernel: rows x columns per register tile
  int value_cols = 0;
  int64_t splits = 1;  // split-K factor
  int64_t items = 0;   // parallel work items
  int threads = 1;
  int64_t sequences = 1;  // a ragged batch's sequences with queries
  // Ragged batches: the time threads spent in work items over threads x the
  // wall time of the parallel loops (measured; 1 = no thread ever idle).
  double utilisation = 1.0;
  // Products in the storage type (x86_dot.h), e.g. "qk=bf16dot pv=bf16dot";
  // empty: f32 products of widened values throughout.
  std::string products;

  // "flash/AVX2 q16xk4 pv4x16 rows=64 ktile=64 split-k=2 threads=2"
  std::string Describe() const;
};

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_FLASH_PARAMS_H_

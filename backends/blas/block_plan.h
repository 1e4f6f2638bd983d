// How the BLAS backend cuts one attention problem into GEMM-sized blocks so
// that its scratch memory stays under a fixed budget for any sequence length.
//
// A work item is (batch b, kv head g, a block of `head_block` of g's query
// heads, a block of `token_block` query positions). Its query rows are
// stacked position-major into one [rows = heads x tokens, d] matrix, and the keys
// it can see are visited in chunks of at most `key_chunk` (past the keys the
// first row sees, e.g. on the causal diagonal, panels of `panel_tokens`
// positions take only the keys they can see):
//   S[rows, kn] = scale * Q[rows, d] . K[k0:k0+kn, d]^T     (cblas_sgemm)
//   P = online softmax of S (running max and sum per row)
//   O[rows, d] (+)= P[rows, kn] . V[k0:k0+kn, d]           (cblas_sgemm)
#ifndef ATTNKIT_BACKENDS_BLAS_BLOCK_PLAN_H_
#define ATTNKIT_BACKENDS_BLAS_BLOCK_PLAN_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/problem.h"

namespace attnkit {
namespace blas {

struct PlanOptions {
  size_t budget_bytes = size_t{64} << 20;  // all workers' scratch together
  int workers = 1;                         // each worker owns one scratch region
  // Query rows per item when memory allows: target_rows / (H/G) positions of
  // every head in the group.
  int64_t target_rows = 256;
  int64_t max_key_chunk = 0;  // 0 = the whole visible key range if it fits
  // Query rows per diagonal panel: panel_rows / heads positions (at least 1);
  // 0 = no panels. Stacked heads keep such panels tall enough for sgemm.
  int64_t panel_rows = 64;
  // false: the same token blocks, but one query head per GEMM (to measure
  // what stacking the group's heads buys). Stacking pays where one head has
  // few query rows (decode: 4 rows instead of 1, ~3x). With T = 1024 a single
  // head already fills 64-256-row GEMMs that run within ~10% of sgemm's peak,
  // and the FLOPs are the same, so there it gains only a few percent
  // (benchmarks/gemm_shapes_bench.cc).
  bool stack_heads = true;
  bool stage_kv = false;  // K/V chunks are converted to f32 in scratch
  // FAST's P.V over int8 V as u8 weights times s8 rows (TakesU8Weights):
  // scratch for the weights, their block scales and the integer sums.
  bool u8_weights = false;
};

struct BlockPlan {
  int64_t head_block = 1;    // query heads of one group per item
  int64_t token_block = 1;   // query positions per item
  int64_t key_chunk = 1;     // keys per S block
  int64_t panel_tokens = 1;  // positions per diagonal panel (<= token_block)
  bool stage_kv = false;
  bool u8_weights = false;  // PlanOptions::u8_weights
  int workers = 1;
  size_t worker_bytes = 0;  // scratch of one worker, 64-byte aligned parts

  int64_t rows() const { return head_block * token_block; }
  size_t total_bytes() const { return worker_bytes * static_cast<size_t>(workers); }
  // Number of work items: B * G * ceil(H/G / head_block) * ceil(Tq / token_block).
  int64_t NumItems(const AttentionProblem& p) const;
};

// One worker's scratch, carved from its region. Sizes in floats:
//   q [rows, E] (gathered Q), s [rows, key_chunk], o [rows, max(E, Ev)]
//   (the accumulator [rows, Ev]; int8 Q.K stages f32 Q rows in it first),
//   row_max [rows], row_sum [rows], row_bad [rows] (1: the row reads a NaN or
//   Inf), q_scale [rows] and k_scale [key_chunk] (int8 Q.K: each row's and
//   key's factor), k [key_chunk, E] and v [key_chunk, Ev] (only when staged).
//   E is head_dim, Ev value_dim(). q, k and v
//   hold 16-bit or int8 operands in place of f32 when the products take them
//   (BlockContext::qk_type, pv_type), in the same bytes.
// With u8 weights (BlockPlan::u8_weights): pw [rows * key_chunk] bytes (the
//   chunk's weights, block after block, each block [rows, its keys]),
//   pw_scale [rows, blocks] (each row's and block's back scale), v_scale
//   [key_chunk] (V's row scales) and pv_sums (U8SumInts: int32 sums of a
//   batch of blocks, [blocks, rows, Ev]).
struct WorkerScratch {
  float* q = nullptr;
  float* s = nullptr;
  float* o = nullptr;
  float* row_max = nullptr;
  float* row_sum = nullptr;
  float* row_bad = nullptr;
  float* q_scale = nullptr;
  float* k_scale = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  uint8_t* pw = nullptr;
  float* pw_scale = nullptr;
  float* v_scale = nullptr;
  int32_t* pv_sums = nullptr;
};

// int32 entries of WorkerScratch::pv_sums: at least one block's sums
// [rows, value_dim], and at least 16 Ki (64 KiB) for batches of blocks.
int64_t U8SumInts(int64_t rows, int64_t value_dim);

// Bytes of one worker's scratch for these block sizes.
size_t WorkerBytes(int64_t rows, int64_t key_chunk, int64_t head_dim, int64_t value_dim,
                   bool stage_kv, bool u8_weights = false);

// Splits `region` (at least plan.worker_bytes, 64-byte aligned) into arrays.
WorkerScratch CarveScratch(const BlockPlan& plan, int64_t head_dim, int64_t value_dim,
                           void* region);

// Chooses block sizes: as many rows as target_rows asks (whole groups of
// query heads, so K/V are shared), the whole visible key range per
// chunk, then shrinks the key chunk, the token block and the head block until
// one worker's scratch fits budget / workers. ResourceExhausted when even one
// row against a 16-key chunk does not fit.
absl::StatusOr<BlockPlan> MakePlan(const AttentionProblem& p, const PlanOptions& options);

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_BLOCK_PLAN_H_

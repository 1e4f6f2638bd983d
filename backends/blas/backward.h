// The backward pass of the BLAS backend (and of onednn, on its engine): dQ,
// dK, dV (and dBias) through blocked GEMM calls over f32 scratch whose size
// is fixed by a budget, whatever the sequence lengths; S and dP on 16-bit
// copies of the rows where every operand is stored in bf16 or f16 and the
// engine multiplies it (Gemm16Type), and under FAST on all-bf16 problems dV,
// dK and dQ too, on P and dX rounded to bf16 (RoundsGradOperands).
//
// A query block stacks `token_block` positions of every query head of KV head
// g position-major (row r = position i0 + r / heads of head h0 + r % heads),
// so one GEMM sums over the group's heads. For each chunk of at most
// `key_chunk` keys the block can see (a tile):
//   S  [R, kn] = scale Q [R, d] K [kn, d]^T, soft-cap, + bias, masks
//   P  = exp(S - lse)                      (0 for blocked pairs, lse = -inf rows)
//   dP [R, kn] = dO [R, Ev] V [kn, Ev]^T,  dS = P (dP - D),  D = rowsum(dO O)
//   dX = dS (1 - tanh^2) with softcap, dS without;  dBias = dS
//   dV [kn, Ev] += P^T dO,  dK [kn, d] += scale dX^T Q,  dQ [R, d] += scale dX K
// Five GEMMs per tile. dK and dV of a span of keys accumulate in f32 scratch
// over every query block (and head) that sees them, and are rounded into
// their dtype once; dQ of a block accumulates over its key chunks.
//
// Work items own disjoint outputs (no atomics), and what each computes, in
// what order, is fixed by the shape and the worker count, never by which
// thread runs it: two calls with the same thread count give the same bits.
//  - kFused: one item per (b, g) when there are at least as many pairs as
//    workers and all keys fit: all query blocks in order, five GEMMs a tile.
//  - kPartitioned: fewer pairs than workers: the query blocks of a pair are
//    dealt round-robin to `parts` items, each accumulating its own dK/dV
//    partials [Tk, d] in a shared region; a second phase adds the partials
//    in part order (the only extra work: parts * Tk * d additions).
//  - kSplit: the keys a group sees do not fit one worker's scratch (or the
//    partials do not fit): items (b, g, key span) make dK and dV, items (b,
//    g, query block) make dQ and dBias; S, P and dP are computed by both
//    (seven GEMMs a tile instead of five).
#ifndef ATTNKIT_BACKENDS_BLAS_BACKWARD_H_
#define ATTNKIT_BACKENDS_BLAS_BACKWARD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "backends/blas/gemm_engine.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {
namespace blas {

struct BackwardOptions {
  size_t budget_bytes = size_t{64} << 20;  // all workers' scratch together
  int workers = 1;                         // each worker owns one scratch region
  int64_t target_rows = 128;               // stacked query rows per block
  int64_t key_chunk = 256;                 // keys per tile
  // The 16-bit type S = Q K^T and dP = dO V^T multiply in (Gemm16Type), or
  // kF32 for f32 GEMMs throughout: the worker regions then also hold
  // 16-bit copies of the staged rows.
  DType gemm16 = DType::kF32;
  // FAST (core/fast_compute.h FastRoundsGradOperands, with gemm16 bf16): P
  // and dX rounded to bf16 (RoundGradOperandRow) so that dV, dK and dQ
  // multiply in Gemm16 too; the regions then hold one [rows, key_chunk]
  // 16-bit block more.
  bool round16 = false;
};

enum class BackwardMode { kFused, kPartitioned, kSplit };

struct BackwardPlan {
  int64_t token_block = 1;  // query positions per block (all heads of the group)
  int64_t heads = 1;        // H / G, stacked in every block
  int64_t key_chunk = 1;    // keys per tile
  int64_t span = 1;         // keys whose dK/dV one worker accumulates
  BackwardMode mode = BackwardMode::kFused;
  int64_t parts = 1;  // kPartitioned: items per (b, g)
  int workers = 1;
  size_t worker_bytes = 0;   // one worker's region (64-byte aligned parts)
  size_t partial_bytes = 0;  // kPartitioned: every (b, g, part)'s dK/dV partials
  bool softcap = false;
  DType gemm16 = DType::kF32;  // BackwardOptions::gemm16
  bool round16 = false;        // BackwardOptions::round16

  int64_t rows() const { return token_block * heads; }
  // The worker regions, then the partials.
  size_t total_bytes() const { return worker_bytes * static_cast<size_t>(workers) + partial_bytes; }
  int64_t QueryBlocks(const AttentionProblem& p) const {
    return (p.q_len + token_block - 1) / token_block;
  }
  int64_t KeySpans(const AttentionProblem& p) const { return (p.kv_len + span - 1) / span; }
  // Items of phase 0, or of phase 1 (the merge, kPartitioned only), which
  // must start after every item of phase 0 has finished. kFused: B * G;
  // kPartitioned: B * G * parts, then B * G; kSplit: B * G * (KeySpans +
  // QueryBlocks).
  int64_t NumItems(const AttentionProblem& p, int phase) const;
};

// Chooses the mode and blocking: target_rows / (H / G) positions per block,
// key_chunk keys per tile; kFused or kPartitioned when their scratch fits
// the budget, else kSplit, shrinking the span, the chunk and the block until
// it does. ResourceExhausted when even one position of the group against a
// 16-key chunk does not fit.
absl::StatusOr<BackwardPlan> MakeBackwardPlan(const AttentionProblem& p,
                                              const BackwardOptions& options);

// The 16-bit type in which the backward's two products of stored values, S
// = Q K^T and dP = dO V^T, can run on `engine` under every compute mode:
// Q, dO, K and V all stored in it (bf16 or f16) and the engine's Gemm16
// taking it. Each product of two 16-bit values is exact in f32 and the sums
// are f32, so the gradients keep the EXACT contract; the other three GEMMs
// multiply f32 P or dX and stay f32 unless FAST rounds those
// (RoundsGradOperands). kF32 otherwise.
DType Gemm16Type(const AttentionProblem& p, const GemmEngine& engine);

// Whether the backward of p on `engine` rounds P and dX to bf16 for its
// other three GEMMs (BackwardOptions::round16): FAST permits it
// (FastRoundsGradOperands) and Gemm16Type is bf16.
bool RoundsGradOperands(const AttentionProblem& p, const GemmEngine& engine);

// The mode and block sizes, for RunInfo::kernel.
std::string DescribeBackwardPlan(const BackwardPlan& plan);

// Runs item `item` (in [0, plan.NumItems(p, phase))) of `phase` on the
// thread of `worker` (in [0, plan.workers)), multiplying with `engine`,
// whose region of `workspace`
// (plan.total_bytes(), 64-byte aligned) it uses as scratch. p, args and
// grads must have passed ValidateGradArgs; the problem is dense (not paged,
// not ragged) with return_lse.
void ComputeBackwardItem(const AttentionProblem& p, const AttentionArgs& args,
                         const GradArgs& grads, const BackwardPlan& plan, int phase, int64_t item,
                         GemmEngine* engine, void* workspace, int worker);

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_BACKWARD_H_

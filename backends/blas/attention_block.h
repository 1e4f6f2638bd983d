// One work item of the BLAS backend (see block_plan.h): a block of stacked
// query rows of one kv head, multiplied against the keys it can see.
#ifndef ATTNKIT_BACKENDS_BLAS_ATTENTION_BLOCK_H_
#define ATTNKIT_BACKENDS_BLAS_ATTENTION_BLOCK_H_

#include <cstdint>
#include <vector>

#include "backends/blas/block_plan.h"
#include "backends/blas/gemm_engine.h"
#include "core/backend.h"
#include "core/kv_rows.h"
#include "core/mask.h"
#include "core/problem.h"

namespace attnkit {
namespace blas {

// Everything the work items of one dense or paged problem share (the whole
// call, or one sequence of a ragged batch); built once per call.
struct BlockContext {
  const AttentionProblem* problem = nullptr;
  const AttentionArgs* args = nullptr;
  GemmEngine* engine = nullptr;  // the library that multiplies (thread-safe)
  BlockPlan plan;
  MaskParams mask;
  KvRows kv_rows;  // where K/V row t of (b, g) lives: dense or through the block table
  // The operand types of the two products (ChooseOperandTypes). qk_type:
  // kF32 (Q and K as f32), kBF16 or kF16 (K's storage type, Q stored in it
  // or rounded to it under FAST), kI8 (FAST: each Q row quantized, int8 K,
  // exact int32 sums, GemmEngine::Int8DotTransB). pv_type: kF32, V's
  // 16-bit type under FAST (P rounded to it before P.V), or kI8 (FAST's u8
  // weights times int8 V as stored, GemmEngine::U8S8DotBatch:
  // TakesU8Weights).
  DType qk_type = DType::kF32;
  DType pv_type = DType::kF32;
  // Q rows may be handed to BLAS in place (f32, unit stride along d) when they
  // form one strided matrix; otherwise they are gathered into scratch.
  bool q_in_place = false;
};

// Sets ctx->qk_type and pv_type from ctx->problem and what ctx->engine
// multiplies: the storage types wherever the engine has the product and the
// compute mode allows it (16-bit Q.K in EXACT needs Q stored in K's type, as
// products of two 16-bit values are exact in f32), else f32.
void ChooseOperandTypes(BlockContext* ctx);

// Whether Q.K runs as a 16-bit GEMM (GemmEngine::Gemm16) for `p` on
// `engine`, as ChooseOperandTypes picks: bf16 or f16 K/V the engine
// multiplies, with Q of that type or under FAST.
bool MultipliesQK16(const AttentionProblem& p, const GemmEngine& engine);

// Whether P.V takes u8 weights times int8 V's rows as stored: FAST with
// int8 V (core/fast_compute.h FastQuantizesWeights) on an engine with an
// exact u8 x s8 GEMM.
bool TakesU8Weights(const AttentionProblem& p, const GemmEngine& engine);

// The K/V types for which `engine` computes FAST in the storage type
// (Capabilities::fast_kv_dtypes): kI8 with an int8 dot (HasInt8Dot: Q.K; its
// P.V is u8 weights times V when HasU8S8Dot too, else f32), kBF16 and kF16
// with their 16-bit GEMMs.
std::vector<DType> FastKvTypes(const GemmEngine& engine);

// True when `t` ([.., T, d]) can be a BLAS operand with leading dimension
// t.strides[2]: f32, unit stride along d, rows at least d apart.
bool BlasCompatible(const TensorView& t, int64_t head_dim);

// True when K and V are staged: converted chunk by chunk into f32 scratch
// [key_chunk, d] for the GEMMs instead of read in place. Needed for 16-bit
// or int8 storage (int8 rows times their scales), for a paged pool (rows
// gathered page by page into one operand, so every GEMM has the shape and
// values it has on the dense layout: the same bits, as sgemm's result does
// not depend on an operand's address or leading dimension), and for views
// BLAS cannot take. `args` null means tensors in p.layout.
bool StagesKv(const AttentionProblem& p, const AttentionArgs* args);

// Item `item` decoded: batch, kv head, first query head and count, first
// query position and count. Token blocks run last-to-first so that under a
// causal mask the heaviest items start first.
struct BlockCoords {
  int64_t b, g, h0, num_heads, i0, num_tokens;
};
BlockCoords DecodeItem(const AttentionProblem& p, const BlockPlan& plan, int64_t item);

// Computes o (and lse) for every query row of `item`, using only `scratch`.
void ComputeBlock(const BlockContext& ctx, int64_t item, const WorkerScratch& scratch);

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_ATTENTION_BLOCK_H_

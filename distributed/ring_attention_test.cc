// Distributed attention on 2, 3 and 4 ranks (distributed/BUILD runs it under
// mpirun): every rank builds the same whole problem from a seed, runs its
// shard, gathers every rank's output and holds the whole to the fp64
// reference with the oracle (oracle/compare.h, oracle/compare_grad.h). Also: a
// second run gives the same bytes, ring and Ulysses agree, and refusals
// (memory budget, unsupported features) reach every rank.
#include "distributed/ring_attention.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/blas/blas_backend.h"
#include "backends/highway/highway_backend.h"
#include "core/status_macros.h"
#include "distributed/mpi_test_main.h"
#include "distributed/shard_rows.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/compare_grad.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace dist {
namespace {

// T = 96 splits over 2, 3 and 4 ranks, zigzag included (2N | 96).
constexpr int64_t kT = 96;

AttentionProblem Problem(const std::string& name, int64_t b, int64_t h, int64_t g, int64_t tq,
                         int64_t tk, int64_t d) {
  AttentionProblem p = BasicProblem(b, h, g, tq, tk, d);
  p.name = name;
  p.return_lse = true;
  return p;
}

// This rank's shard of a whole tensor, in a fresh contiguous tensor.
absl::StatusOr<Tensor> Shard(const TensorView& full, const ShardLayout& layout, int rank) {
  std::vector<int64_t> shape(full.shape.begin(), full.shape.begin() + full.rank);
  shape[2] = layout.LocalRows();
  ATTNKIT_ASSIGN_OR_RETURN(Tensor t, Tensor::Contiguous(full.dtype, shape));
  ATTNKIT_RETURN_IF_ERROR(ExtractShard(full, layout, rank, t.view()));
  return t;
}

// Every rank's `local` gathered into the whole tensor `full` on every rank.
absl::Status GatherWhole(Communicator& comm, const TensorView& local, const ShardLayout& layout,
                         const TensorView& full) {
  const int64_t bytes = local.NumElements() * static_cast<int64_t>(DTypeSize(local.dtype));
  std::vector<char> all(static_cast<size_t>(bytes * comm.size()));
  ATTNKIT_RETURN_IF_ERROR(comm.AllGather(local.data, all.data(), bytes, "gathering a shard"));
  for (int r = 0; r < comm.size(); ++r) {
    TensorView piece = local;
    piece.data = all.data() + r * bytes;
    ATTNKIT_RETURN_IF_ERROR(InsertShard(piece, layout, r, full));
  }
  return absl::OkStatus();
}

struct Run {
  ProblemData data;           // the whole problem; o/lse hold the gathered result
  std::vector<char> o_bytes;  // this rank's O shard, for the repeat check
};

// Runs `p` distributed with `s` on `backend`, gathers O and lse, and checks
// them against the reference; with `backward` also dQ, dK, dV.
absl::Status CheckCase(Communicator& comm, Backend& backend, const AttentionProblem& p, Strategy s,
                       bool backward, std::vector<char>* o_bytes = nullptr,
                       DistStats* stats = nullptr) {
  DistributedAttention dist(&comm, &backend);
  const Strategy resolved = dist.Resolve(p, s);
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, comm.size(), resolved));
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout kl, KvShard(p, comm.size(), resolved));
  // The whole problem exists here only as the oracle's input: it may exceed
  // the per-rank budget the distributed run is held to.
  AttentionProblem whole_problem = p;
  whole_problem.memory_budget_bytes = kDefaultMemoryBudgetBytes;
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(whole_problem, 7));
  const AttentionArgs whole = data.args();
  ATTNKIT_ASSIGN_OR_RETURN(Tensor q, Shard(whole.q, ql, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor k, Shard(whole.k, kl, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor v, Shard(whole.v, kl, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor o, Shard(whole.o, ql, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor lse, Shard(whole.lse, ql, comm.rank()));
  ShardArgs shard{q.view(), k.view(), v.view(), o.view(), lse.view()};
  ATTNKIT_RETURN_IF_ERROR(dist.Forward(p, s, shard));
  if (stats != nullptr) *stats = dist.stats();
  ATTNKIT_RETURN_IF_ERROR(GatherWhole(comm, o.view(), ql, whole.o));
  ATTNKIT_RETURN_IF_ERROR(GatherWhole(comm, lse.view(), ql, whole.lse));
  const Comparison c = CompareToReference(p, whole, ComputeReference(p, whole));
  ATTNKIT_MPI_EXPECT(c.ok(), p.Id(), " ", StrategyName(resolved), " on ", backend.Name(), ": ",
                     c.first_failure, " (", c.mismatches, " of ", c.checked, " outside)");
  if (o_bytes != nullptr) {
    const char* begin = static_cast<const char*>(o.data());
    o_bytes->assign(begin, begin + o.view().NumElements() * DTypeSize(p.dtype));
  }
  if (!backward) return absl::OkStatus();

  ATTNKIT_ASSIGN_OR_RETURN(GradData grads, GradData::Random(whole_problem, 11, false));
  const GradArgs g = grads.args();
  ATTNKIT_ASSIGN_OR_RETURN(Tensor d_o, Shard(g.d_o, ql, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor dq, Shard(g.dq, ql, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor dk, Shard(g.dk, kl, comm.rank()));
  ATTNKIT_ASSIGN_OR_RETURN(Tensor dv, Shard(g.dv, kl, comm.rank()));
  ATTNKIT_RETURN_IF_ERROR(
      dist.Backward(p, s, shard, ShardGrads{d_o.view(), dq.view(), dk.view(), dv.view()}));
  ATTNKIT_RETURN_IF_ERROR(GatherWhole(comm, dq.view(), ql, g.dq));
  ATTNKIT_RETURN_IF_ERROR(GatherWhole(comm, dk.view(), kl, g.dk));
  ATTNKIT_RETURN_IF_ERROR(GatherWhole(comm, dv.view(), kl, g.dv));
  const Comparison cg = CompareGradients(p, g, ComputeReferenceBackward(p, whole, g.d_o));
  ATTNKIT_MPI_EXPECT(cg.ok(), p.Id(), " backward on ", backend.Name(), ": ", cg.first_failure, " (",
                     cg.mismatches, " of ", cg.checked, " outside)");
  return absl::OkStatus();
}

std::unique_ptr<Backend> Highway() {
  auto b = MakeHighwayBackend();
  (void)b->SetNumThreads(1);
  return b;
}

absl::Status RingMhaNoMask(Communicator& comm) {
  auto hw = Highway();
  return CheckCase(comm, *hw, Problem("mha", 2, 4, 4, kT, kT, 32), Strategy::kRing, false);
}

absl::Status RingGqaCausalZigzag(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("gqa_causal", 1, 8, 2, kT, kT, 64);
  p.mask = MaskKind::kCausal;
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, comm.size(), Strategy::kRing));
  ATTNKIT_MPI_EXPECT(ql.sharding == Sharding::kZigzag, "causal self-attention is zigzag");
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, false));
  // bf16 Q and K/V: partials stay f32, O rounds once.
  p.dtype = p.kv_dtype = DType::kBF16;
  return CheckCase(comm, *hw, p, Strategy::kRing, false);
}

absl::Status RingMqaWindow(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("mqa_window", 1, 4, 1, kT, kT, 32);
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 20;
  p.window_right = 0;
  DistStats stats;
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, false, nullptr, &stats));
  // Chunks of 96 / N >= 24 rows: a 20-key window reaches one rank back, so
  // the ring stops after 2 steps and blocks travel no further.
  ATTNKIT_MPI_EXPECT(stats.steps == std::min(comm.size(), 2), "window ring ran ", stats.steps,
                     " steps on ", comm.size(), " ranks");
  // A window that looks ahead needs the next rank's block: the whole ring.
  p.window_right = 3;
  return CheckCase(comm, *hw, p, Strategy::kRing, false);
}

absl::Status RingPaddingAndBottomRightCross(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("cross_br_pad", 3, 4, 2, kT / 2, kT, 32);
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.kv_lengths = {kT, 50, 7};
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, false));
  auto blas = MakeBlasBackend();
  return CheckCase(comm, *blas, p, Strategy::kRing, false);
}

absl::Status RingSoftcapScale(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("softcap", 1, 2, 2, kT, kT, 16);
  p.softcap = 5.0f;
  p.scale = 0.7f;
  return CheckCase(comm, *hw, p, Strategy::kRing, false);
}

absl::Status UlyssesMatchesTheReference(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("ulysses_mqa_causal", 2, 12, 1, kT, kT, 32);
  p.mask = MaskKind::kCausal;
  p.kv_lengths = {kT, 61};
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kUlysses, false));
  if (comm.size() != 3) {  // 3 ranks cannot split 2 K/V heads
    AttentionProblem g = Problem("ulysses_gqa", 1, 8, 2, kT, kT, 32);
    ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, g, Strategy::kUlysses, false));
  }
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kAuto, false));
  // The backward pass: a K/V head shared by every rank (MQA, N % G == 0),
  // then split (G % N == 0) or shared by two (4 ranks, G = 2); bf16.
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kUlysses, true));
  if (comm.size() != 3) {
    AttentionProblem g = Problem("ulysses_bwd_gqa_bf16", 1, 8, 2, kT, kT, 32);
    g.mask = MaskKind::kSlidingWindow;
    g.window_left = 17;
    g.window_right = 2;
    g.dtype = g.kv_dtype = DType::kBF16;
    ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, g, Strategy::kUlysses, true));
  }
  return absl::OkStatus();
}

absl::Status RepeatIsBitwiseEqual(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("repeat", 1, 4, 2, kT, kT, 32);
  p.mask = MaskKind::kCausal;
  std::vector<char> first, second;
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, false, &first));
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, false, &second));
  ATTNKIT_MPI_EXPECT(first == second, "a second run gave other bytes on rank ", comm.rank());
  return absl::OkStatus();
}

absl::Status RingBackward(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("bwd_gqa_causal", 1, 4, 2, kT, kT, 32);
  p.mask = MaskKind::kCausal;
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, p, Strategy::kRing, true));
  AttentionProblem w = Problem("bwd_window_pad_bf16", 2, 4, 1, kT, kT, 32);
  w.mask = MaskKind::kSlidingWindow;
  w.window_left = 30;
  w.window_right = 0;
  w.kv_lengths = {kT, 40};
  w.dtype = w.kv_dtype = DType::kBF16;
  ATTNKIT_RETURN_IF_ERROR(CheckCase(comm, *hw, w, Strategy::kRing, true));
  auto blas = MakeBlasBackend();
  return CheckCase(comm, *blas, p, Strategy::kRing, true);
}

// A problem over one process's memory budget runs when each rank's share
// fits: the single-process check refuses it before allocating.
absl::Status OverBudgetProblemRunsSharded(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("over_budget", 1, 8, 2, 4 * kT, 4 * kT, 64);
  p.mask = MaskKind::kCausal;
  ATTNKIT_ASSIGN_OR_RETURN(int64_t per_rank, BytesPerRank(p, comm.size(), Strategy::kRing, false));
  ATTNKIT_ASSIGN_OR_RETURN(int64_t whole, ProblemBytes(p));
  p.memory_budget_bytes = per_rank;
  if (comm.size() >= 3) {  // at 2 ranks the buffers outweigh the halving
    ATTNKIT_MPI_EXPECT(per_rank < whole, "one rank needs ", per_rank, " of ", whole, " bytes");
    const absl::Status single = CheckMemoryBudget(p);
    ATTNKIT_MPI_EXPECT(single.code() == absl::StatusCode::kResourceExhausted,
                       "one process was not refused: ", single.ToString());
  }
  return CheckCase(comm, *hw, p, Strategy::kRing, false);
}

// Refusals reach every rank with the same message, before any allocation.
absl::Status RefusalsAreAgreed(Communicator& comm) {
  auto hw = Highway();
  AttentionProblem p = Problem("budget", 1, 4, 2, kT, kT, 32);
  p.memory_budget_bytes = 4096;
  DistributedAttention dist(&comm, hw.get());
  absl::Status s = dist.Forward(p, Strategy::kRing, ShardArgs{});
  ATTNKIT_MPI_EXPECT(s.code() == absl::StatusCode::kResourceExhausted &&
                         absl::StrContains(s.message(), "memory_budget_bytes (4096)"),
                     "budget refusal: ", s.ToString());
  AttentionProblem odd = Problem("odd", 1, 4, 2, kT + 1, kT + 1, 32);
  s = dist.Forward(odd, Strategy::kRing, ShardArgs{});
  ATTNKIT_MPI_EXPECT(absl::StrContains(s.message(), "q_len (97) must be a positive multiple"),
                     "length refusal: ", s.ToString());
  AttentionProblem bias = Problem("bias", 1, 4, 2, kT, kT, 32);
  bias.additive_bias = true;
  s = dist.Forward(bias, Strategy::kRing, ShardArgs{});
  ATTNKIT_MPI_EXPECT(absl::StrContains(s.message(), "additive bias is not sharded"),
                     "bias refusal: ", s.ToString());
  return absl::OkStatus();
}

}  // namespace
}  // namespace dist
}  // namespace attnkit

int main(int argc, char** argv) {
  using namespace attnkit::dist;
  return RunMpiChecks(argc, argv,
                      {
                          {"ring_mha_no_mask", RingMhaNoMask},
                          {"ring_gqa_causal_zigzag", RingGqaCausalZigzag},
                          {"ring_mqa_window", RingMqaWindow},
                          {"ring_padding_bottom_right_cross", RingPaddingAndBottomRightCross},
                          {"ring_softcap_scale", RingSoftcapScale},
                          {"ulysses", UlyssesMatchesTheReference},
                          {"repeat_is_bitwise_equal", RepeatIsBitwiseEqual},
                          {"ring_backward", RingBackward},
                          {"over_budget_problem_runs_sharded", OverBudgetProblemRunsSharded},
                          {"refusals_are_agreed", RefusalsAreAgreed},
                      });
}

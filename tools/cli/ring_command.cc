// `attnkit ring` (tools/cli/ring_command.h): one problem sharded over the
// ranks of an MPI job, with the per-rank table on rank 0 and, with --check,
// the gathered result against the single-process fp64 oracle.
#include "tools/cli/ring_command.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "distributed/comm.h"
#include "distributed/ring_attention.h"
#include "distributed/shard_data.h"
#include "distributed/shard_rows.h"
#include "distributed/strategy.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/compare_grad.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace {

using dist::Communicator;
using dist::DistStats;
using dist::ShardLayout;
using dist::Strategy;

// --inject_fault, parsed: which rank does what before the ring starts.
struct Fault {
  enum Kind { kNone, kStall, kExit } kind = kNone;
  int rank = -1;
};

absl::StatusOr<Fault> ParseFault(const std::string& text) {
  Fault f;
  if (text.empty()) return f;
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  int rank = -1;
  if (parts.size() != 2 || (parts[0] != "stall" && parts[0] != "exit") ||
      !absl::SimpleAtoi(parts[1], &rank) || rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--inject_fault (%s) must be stall:R or exit:R with R a rank >= 0", text));
  }
  f.kind = parts[0] == "stall" ? Fault::kStall : Fault::kExit;
  f.rank = rank;
  return f;
}

absl::Status CheckRingOptions(const RingOptions& ring) {
  if (!(ring.timeout_s > 0) || ring.timeout_s > 86400) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--timeout (%g) must be in (0, 86400] seconds", ring.timeout_s));
  }
  if (ring.repeats < 1 || ring.repeats > 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--repeats (%d) must be in [1, 1000]", ring.repeats));
  }
  ATTNKIT_RETURN_IF_ERROR(dist::ParseStrategy(ring.strategy).status());
  return ParseFault(ring.inject_fault).status();
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The backend's f32 attention rate on a small unmasked block with the
// problem's head_dim and K/V dtype (best of three), averaged over the ranks
// so that every rank's cost model, and so `auto`, sees the same figure.
absl::StatusOr<double> MeasureFlopsPerSecond(Communicator& comm, Backend* backend,
                                             const AttentionProblem& p) {
  AttentionProblem probe = BasicProblem(1, 1, 1, 256, 256, p.head_dim);
  probe.kv_dtype = p.kv_dtype;
  probe.backend = backend->Name();
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(probe, 1));
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ATTNKIT_RETURN_IF_ERROR(backend->Forward(probe, data.args()));
    best = std::min(best, SecondsSince(start));
  }
  const double rate = UsefulFlops(probe) / std::max(best, 1e-9);
  ATTNKIT_ASSIGN_OR_RETURN(const double sum, comm.SumOverRanks(rate, "the compute rate"));
  return sum / comm.size();
}

// One run's figures on one rank, as doubles for Gather.
constexpr int kStatFields = 9;
void PackStats(const DistStats& s, double* out) {
  const double fields[kStatFields] = {s.compute_s,
                                      s.wait_s,
                                      s.total_s,
                                      static_cast<double>(s.bytes_sent),
                                      static_cast<double>(s.blocks_computed),
                                      static_cast<double>(s.blocks_skipped),
                                      s.overlap,
                                      static_cast<double>(s.steps),
                                      s.transfer_s};
  std::copy(fields, fields + kStatFields, out);
}

// Rank 0's table of one pass: a row per rank, then the job's figures
// (time = the slowest rank's).
std::string FormatStats(const std::string& pass, const std::vector<double>& all, int ranks,
                        double useful_flops) {
  std::string out = absl::StrFormat("%s pass: per rank\n%4s %10s %10s %10s %10s %12s %8s %8s %8s\n",
                                    pass, "rank", "compute s", "transfer s", "wait s", "total s",
                                    "bytes sent", "blocks", "skipped", "overlap");
  double slowest = 0, bytes = 0, compute = 0, wait = 0;
  for (int r = 0; r < ranks; ++r) {
    const double* f = &all[static_cast<size_t>(r) * kStatFields];
    absl::StrAppendFormat(&out, "%4d %10.4f %10.4f %10.4f %10.4f %12.0f %8.0f %8.0f %7.1f%%\n", r,
                          f[0], f[8], f[1], f[2], f[3], f[4], f[5], 100.0 * f[6]);
    slowest = std::max(slowest, f[2]);
    bytes += f[3];
    compute += f[0];
    wait += f[1];
  }
  absl::StrAppendFormat(&out, "%s: %d steps, %.4f s (slowest rank), %.2f GFLOP/s useful\n", pass,
                        static_cast<int>(all[7]), slowest,
                        useful_flops / std::max(slowest, 1e-12) * 1e-9);
  absl::StrAppendFormat(&out,
                        "%s: %.0f bytes sent in all; summed over ranks: compute %.4f s, network "
                        "wait %.4f s\n",
                        pass, bytes, compute, wait);
  return out;
}

// One output shard of every rank, gathered on rank 0 (`bytes` holds rank
// r's copy of `local` at r * local's size; empty elsewhere).
struct Gathered {
  TensorView local;  // this rank's shard: the shape and dtype of each part
  ShardLayout layout;
  std::vector<char> bytes;
};

absl::StatusOr<Gathered> GatherShard(Communicator& comm, const TensorView& local,
                                     const ShardLayout& layout, const std::string& what) {
  Gathered g{local, layout, {}};
  const int64_t bytes = local.NumElements() * static_cast<int64_t>(DTypeSize(local.dtype));
  if (comm.rank() == 0) g.bytes.resize(static_cast<size_t>(bytes) * comm.size());
  ATTNKIT_RETURN_IF_ERROR(comm.Gather(local.data, g.bytes.data(), bytes, 0, "gathering " + what));
  return g;
}

// Rank 0: every rank's rows of `g` into the full tensor.
absl::Status InsertAll(const Gathered& g, int ranks, const TensorView& full) {
  const size_t bytes = g.bytes.size() / static_cast<size_t>(ranks);
  for (int r = 0; r < ranks; ++r) {
    TensorView part = g.local;
    part.data = const_cast<char*>(g.bytes.data()) + bytes * r;
    ATTNKIT_RETURN_IF_ERROR(dist::InsertShard(part, g.layout, r, full));
  }
  return absl::OkStatus();
}

std::string Verdict(const std::string& what, const Comparison& c) {
  return absl::StrFormat(
      "check %s: %s: max err/bound %.3f, max abs err %.3e, max rel err %.3e, %d elements%s\n", what,
      c.ok() ? "pass" : "FAIL", c.max_bound_fraction, c.max_abs_err, c.max_rel_err, c.checked,
      c.ok() ? "" : absl::StrCat("; first mismatch: ", c.first_failure));
}

// Everything after MPI_Init; any error ends the job in RingCommand.
absl::Status RunRing(Communicator& comm, const BackendRegistry& registry, const CliOptions& options,
                     const RingOptions& ring, std::ostream& out) {
  const int n = comm.size(), rank = comm.rank();
  ATTNKIT_ASSIGN_OR_RETURN(const Fault fault, ParseFault(ring.inject_fault));
  if (fault.kind != Fault::kNone && fault.rank >= n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--inject_fault (%s) names rank %d of a %d-rank job", ring.inject_fault, fault.rank, n));
  }
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem p, ProblemFromConfig(config));
  // The backward pass is a separate call here; it reads the forward's lse.
  const bool grad = options.grad || p.backward;
  p.backward = false;
  if (grad) p.return_lse = true;
  std::string backend_name = options.backend.empty() ? p.backend : options.backend;
  if (backend_name.empty() || backend_name == "auto") backend_name = "highway";
  ATTNKIT_ASSIGN_OR_RETURN(Backend * backend, registry.Find(backend_name));
  if (!backend->UsesHostMemory()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--backend (%s) computes in device memory; attnkit ring runs host-memory backends",
        backend_name));
  }
  p.backend = backend_name;
  if (options.threads > 0) ATTNKIT_RETURN_IF_ERROR(backend->SetNumThreads(options.threads));
  ATTNKIT_ASSIGN_OR_RETURN(const Strategy requested, dist::ParseStrategy(ring.strategy));

  dist::LinkModel link;
  if (n > 1) {
    ATTNKIT_ASSIGN_OR_RETURN(link, comm.MeasureLink());
  }
  double flops_per_s = 0;
  if (requested == Strategy::kAuto) {
    ATTNKIT_ASSIGN_OR_RETURN(flops_per_s, MeasureFlopsPerSecond(comm, backend, p));
  }
  dist::DistributedAttention attention(&comm, backend, link, flops_per_s);
  // Every rank resolves `auto` alike: the link is broadcast and the rate is
  // the mean over ranks.
  const Strategy s = attention.Resolve(p, requested);
  ATTNKIT_RETURN_IF_ERROR(attention.Admit(p, s, grad));
  ATTNKIT_ASSIGN_OR_RETURN(const ShardLayout q_layout, dist::QueryShard(p, n, s));
  ATTNKIT_ASSIGN_OR_RETURN(const ShardLayout kv_layout, dist::KvShard(p, n, s));
  ATTNKIT_ASSIGN_OR_RETURN(dist::ShardData shard,
                           dist::ShardData::Random(p, q_layout, kv_layout, rank, p.seed, grad));
  if (rank == 0) {
    out << absl::StrFormat(
        "ring %s on %d rank%s: strategy %s%s, backend %s, q %s / kv %s sharding, seed %d\n", p.Id(),
        n, n == 1 ? "" : "s", dist::StrategyName(s), requested == Strategy::kAuto ? " (auto)" : "",
        backend_name, dist::ShardingName(q_layout.sharding), dist::ShardingName(kv_layout.sharding),
        p.seed);
    if (n > 1) {
      out << absl::StrFormat("link (ranks 0-1): %.2f GB/s, %.1f us latency\n",
                             link.bandwidth_bytes_per_s * 1e-9, link.latency_s * 1e6);
    }
    out.flush();
  }

  if (fault.rank == rank) {
    if (fault.kind == Fault::kExit) _exit(3);
    // Far past every peer's deadline: they must give up on this rank.
    std::this_thread::sleep_for(std::chrono::duration<double>(10 * ring.timeout_s + 60));
  }

  // The fastest repeat (by the slowest rank's time) of each pass.
  std::vector<double> fwd(kStatFields), bwd(kStatFields);
  double best_fwd = std::numeric_limits<double>::infinity(), best_bwd = best_fwd;
  for (int i = 0; i < ring.repeats; ++i) {
    ATTNKIT_RETURN_IF_ERROR(attention.Forward(p, s, shard.args()));
    ATTNKIT_ASSIGN_OR_RETURN(const double t,
                             comm.MaxOverRanks(attention.stats().total_s, "the forward time"));
    if (t < best_fwd) {
      best_fwd = t;
      PackStats(attention.stats(), fwd.data());
    }
    if (!grad) continue;
    ATTNKIT_RETURN_IF_ERROR(attention.Backward(p, s, shard.args(), shard.grads()));
    ATTNKIT_ASSIGN_OR_RETURN(const double tb,
                             comm.MaxOverRanks(attention.stats().total_s, "the backward time"));
    if (tb < best_bwd) {
      best_bwd = tb;
      PackStats(attention.stats(), bwd.data());
    }
  }
  std::vector<double> all_fwd(rank == 0 ? kStatFields * n : 0), all_bwd(all_fwd.size());
  const int64_t stat_bytes = kStatFields * sizeof(double);
  ATTNKIT_RETURN_IF_ERROR(comm.Gather(fwd.data(), all_fwd.data(), stat_bytes, 0, "the stats"));
  if (grad) {
    ATTNKIT_RETURN_IF_ERROR(comm.Gather(bwd.data(), all_bwd.data(), stat_bytes, 0, "the stats"));
  }
  if (rank == 0) {
    out << FormatStats("forward", all_fwd, n, UsefulFlops(p));
    if (grad) out << FormatStats("backward", all_bwd, n, UsefulBackwardFlops(p));
    out.flush();
  }
  if (!ring.check) return absl::OkStatus();

  // Every shard first (the other ranks are then done), then rank 0 builds
  // the whole problem for the oracle (the budget is per rank).
  std::vector<Gathered> outputs;  // O, LSE, then dQ, dK, dV
  ATTNKIT_ASSIGN_OR_RETURN(outputs.emplace_back(),
                           GatherShard(comm, shard.o.view(), q_layout, "O"));
  if (p.return_lse) {
    ATTNKIT_ASSIGN_OR_RETURN(outputs.emplace_back(),
                             GatherShard(comm, shard.lse.view(), q_layout, "the LSE"));
  }
  if (grad) {
    ATTNKIT_ASSIGN_OR_RETURN(outputs.emplace_back(),
                             GatherShard(comm, shard.dq.view(), q_layout, "dQ"));
    ATTNKIT_ASSIGN_OR_RETURN(outputs.emplace_back(),
                             GatherShard(comm, shard.dk.view(), kv_layout, "dK"));
    ATTNKIT_ASSIGN_OR_RETURN(outputs.emplace_back(),
                             GatherShard(comm, shard.dv.view(), kv_layout, "dV"));
  }
  if (rank != 0) return absl::OkStatus();
  ATTNKIT_ASSIGN_OR_RETURN(dist::FullData full, dist::FullProblemData(p, p.seed, grad));
  Tensor dq, dk, dv;
  std::vector<TensorView> fulls = {full.data.o.view()};
  if (p.return_lse) fulls.push_back(full.data.lse.view());
  if (grad) {
    const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
    ATTNKIT_ASSIGN_OR_RETURN(dq, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(dk, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(dv, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, d));
    fulls.insert(fulls.end(), {dq.view(), dk.view(), dv.view()});
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    ATTNKIT_RETURN_IF_ERROR(InsertAll(outputs[i], n, fulls[i]));
    outputs[i].bytes = std::vector<char>();  // freed as soon as it is placed
  }
  const auto ref_start = std::chrono::steady_clock::now();
  const ReferenceResult ref = ComputeReference(p, full.data.args());
  const Comparison c = CompareToReference(p, full.data.args(), ref);
  out << absl::StrFormat("fp64 oracle (whole problem on rank 0) in %.3f s\n",
                         SecondsSince(ref_start));
  out << Verdict(p.return_lse ? "O and LSE" : "O", c);
  bool ok = c.ok();
  if (grad) {
    const ReferenceGradients gref = ComputeReferenceBackward(p, full.data.args(), full.d_o.view());
    const Comparison g = CompareGradients(
        p, GradArgs{full.d_o.view(), dq.view(), dk.view(), dv.view(), TensorView()}, gref);
    out << Verdict("dQ, dK, dV", g);
    ok = ok && g.ok();
  }
  out.flush();
  if (!ok) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the gathered result of %s on %d ranks disagrees with the fp64 reference", p.Id(), n));
  }
  return absl::OkStatus();
}

[[noreturn]] void EndJob(Communicator* comm, int rank, const absl::Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "attnkit ring: rank %d: %s\n", rank, status.ToString().c_str());
  std::fflush(stderr);
  if (comm != nullptr) comm->Abort(status, 1);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);  // MPI_Abort does not return; this is for the compiler
}

}  // namespace

absl::Status RingCommand(const BackendRegistry& registry, const CliOptions& options,
                         const RingOptions& ring, std::ostream& out) {
  ATTNKIT_RETURN_IF_ERROR(CheckRingOptions(ring));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    return absl::FailedPreconditionError("attnkit ring: MPI is already initialised");
  }
  int provided = 0;
  const int init = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (init != MPI_SUCCESS) return dist::MpiStatus(init, "MPI_Init_thread");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_FUNNELED) {
    EndJob(nullptr, rank,
           absl::FailedPreconditionError(
               absl::StrFormat("MPI provides thread level %d, below MPI_THREAD_FUNNELED (%d)",
                               provided, MPI_THREAD_FUNNELED)));
  }
  dist::CommOptions comm_options;
  comm_options.timeout_s = ring.timeout_s;
  absl::StatusOr<Communicator> comm = Communicator::Wrap(MPI_COMM_WORLD, comm_options);
  if (!comm.ok()) EndJob(nullptr, rank, comm.status());
  const absl::Status status = RunRing(*comm, registry, options, ring, out);
  if (!status.ok()) EndJob(&*comm, rank, status);
  MPI_Finalize();
  return absl::OkStatus();
}

}  // namespace attnkit

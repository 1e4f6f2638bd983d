// Cost model of distributed attention: the time, traffic and memory of the
// ring and Ulysses strategies on N ranks, from a problem, a link (bandwidth,
// latency) and a measured compute rate. It chooses the strategy of
// `--strategy=auto` and projects large-scale runs (distributed/ring_bench prints it with a measured
// compute rate). Its assumptions are in distributed/README.md.
#ifndef ATTNKIT_DISTRIBUTED_COST_MODEL_H_
#define ATTNKIT_DISTRIBUTED_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/problem.h"
#include "distributed/comm.h"
#include "distributed/strategy.h"

namespace attnkit {
namespace dist {

// One strategy on one problem and rank count (per rank; ranks are equal).
struct StrategyEstimate {
  Strategy strategy = Strategy::kRing;
  int ranks = 1;
  double compute_s = 0.0;       // attention FLOPs on this rank / flops_per_s
  double comm_s = 0.0;          // bytes moved / bandwidth + messages * latency
  double exposed_comm_s = 0.0;  // communication not hidden behind compute
  double time_s = 0.0;          // compute_s + exposed_comm_s
  int64_t bytes_sent = 0;       // by one rank
  int64_t memory_bytes = 0;     // one rank's tensors and buffers
  double efficiency = 0.0;      // single-rank compute time / (ranks * time_s)
  bool comm_hidden = false;     // exposed_comm_s == 0
};

// Ring: N steps; each moves this rank's K/V block (2 * B * G * (Tk/N) * d *
// element bytes) to the next rank while computing one block, so a step costs
// max(block compute, block transfer). Causal problems use zigzag sharding
// (equal work per rank).
StrategyEstimate EstimateRing(const AttentionProblem& p, int ranks, const LinkModel& link,
                              double flops_per_s);
// Ulysses: all-to-alls of Q, K, V in and O out (each rank keeps 1/N of its
// shard and sends the rest), not overlapped with compute.
StrategyEstimate EstimateUlysses(const AttentionProblem& p, int ranks, const LinkModel& link,
                                 double flops_per_s);

// The strategy `auto` runs: Ulysses when `ulysses_ok` (distributed/ring_attention.h's
// UlyssesSupports) and its estimate is faster, else ring.
Strategy ChooseStrategy(const AttentionProblem& p, int ranks, const LinkModel& link,
                        double flops_per_s, const absl::Status& ulysses_ok);

// One row of the scale projection: a prefill of `tokens` on `ranks` ranks
// over a link of `link_gbit_per_s`.
struct ProjectionRow {
  int64_t tokens = 0;
  int ranks = 0;
  double link_gbit_per_s = 0.0;
  StrategyEstimate ring;
  StrategyEstimate ulysses;  // ranks > H: not possible (strategy kAuto marks it)
};

// Rows for `tokens` x `ranks` x `links_gbit` of the layer `layer` (its
// q_len/kv_len are replaced by each token count), link latency `latency_s`.
std::vector<ProjectionRow> Project(const AttentionProblem& layer,
                                   const std::vector<int64_t>& tokens,
                                   const std::vector<int>& ranks,
                                   const std::vector<double>& links_gbit, double latency_s,
                                   double flops_per_s);
// A fixed-width table, one row per ProjectionRow, with a header naming the
// units and a line per (tokens, link) saying from which rank count the ring
// no longer hides its communication.
std::string FormatProjection(const std::vector<ProjectionRow>& rows);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_COST_MODEL_H_

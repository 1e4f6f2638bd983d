// The cost model of ring and Ulysses attention (distributed/cost_model.h). Every
// quantity is a double until it is stored, so a million-token layer cannot
// overflow; the assumptions are listed in distributed/README.md ("Cost model").
#include "distributed/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dtype.h"

namespace attnkit {
namespace dist {
namespace {

constexpr double kF32Bytes = 4.0;
// Messages per ring step: the K block and the V block.
constexpr double kRingMessagesPerStep = 2.0;
// All-to-alls of a Ulysses call: Q, K and V in, O out.
constexpr double kUlyssesAllToAlls = 4.0;

double D(int64_t x) { return static_cast<double>(x); }
int64_t Bytes(double x) { return static_cast<int64_t>(std::llround(x)); }

// Inputs the model cannot use: no ranks, no compute rate, or (with more
// than one rank) a link that moves nothing. Such an estimate is "not
// possible" (strategy kAuto, every figure 0).
bool UsableInputs(int ranks, const LinkModel& link, double flops_per_s) {
  if (ranks < 1 || !(flops_per_s > 0.0) || !std::isfinite(flops_per_s)) return false;
  if (ranks == 1) return true;
  return link.bandwidth_bytes_per_s > 0.0 && std::isfinite(link.bandwidth_bytes_per_s) &&
         link.latency_s >= 0.0 && std::isfinite(link.latency_s);
}

// The whole problem's useful FLOPs (4 * d * visible pairs) and its time on
// one rank at `flops_per_s`.
double SingleRankSeconds(const AttentionProblem& p, double flops_per_s) {
  return UsefulFlops(p) / flops_per_s;
}

// Fills time, efficiency and comm_hidden from compute_s and exposed_comm_s.
void Finish(double single_rank_s, StrategyEstimate* e) {
  e->time_s = e->compute_s + e->exposed_comm_s;
  e->comm_hidden = e->exposed_comm_s <= 0.0;
  const double denom = D(e->ranks) * e->time_s;
  e->efficiency = denom > 0.0 ? single_rank_s / denom : 1.0;
}

// Ulysses splits query heads H and key/value heads G over N ranks: H % N
// == 0, and G % N == 0 (G/N KV heads each) or N % G == 0 (each KV head
// copied to N/G ranks); sequence shards need Tq % N == Tk % N == 0.
bool UlyssesShapeOk(const AttentionProblem& p, int n) {
  if (p.num_heads % n != 0) return false;
  if (p.num_kv_heads % n != 0 && n % p.num_kv_heads != 0) return false;
  return p.q_len % n == 0 && p.kv_len % n == 0;
}

std::string TokensText(int64_t tokens) {
  if (tokens > 0 && tokens % (int64_t{1} << 20) == 0) return absl::StrCat(tokens >> 20, "M");
  if (tokens > 0 && tokens % 1024 == 0) return absl::StrCat(tokens / 1024, "k");
  return absl::StrCat(tokens);
}

std::string Seconds(double s) { return absl::StrFormat("%.4g", s); }
std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f", D(bytes) / (1024.0 * 1024.0)); }

}  // namespace

StrategyEstimate EstimateRing(const AttentionProblem& p, int ranks, const LinkModel& link,
                              double flops_per_s) {
  StrategyEstimate e;
  e.ranks = ranks;
  if (!UsableInputs(ranks, link, flops_per_s)) {
    e.strategy = Strategy::kAuto;
    return e;
  }
  e.strategy = Strategy::kRing;
  const double n = ranks;
  const double single_s = SingleRankSeconds(p, flops_per_s);
  // Each rank does 1/N of the work (zigzag balances causal), in N equal
  // steps of one (query shard, K/V block) pair: F / N^2 per step.
  e.compute_s = single_s / n;
  const double step_compute_s = e.compute_s / n;
  // The K and V block a step passes on: [B, G, Tk/N, d] each.
  const double block_bytes = 2.0 * D(p.batch) * D(p.num_kv_heads) * (D(p.kv_len) / n) *
                             D(p.head_dim) * D(DTypeSize(p.kv_dtype));
  // N - 1 transfers (the last block goes nowhere), each overlapping the
  // compute of the step before the block is needed.
  const double transfers = n - 1.0;
  const double step_comm_s =
      ranks > 1 ? block_bytes / link.bandwidth_bytes_per_s + kRingMessagesPerStep * link.latency_s
                : 0.0;
  e.comm_s = transfers * step_comm_s;
  e.exposed_comm_s = transfers * std::max(0.0, step_comm_s - step_compute_s);
  e.bytes_sent = Bytes(transfers * block_bytes);
  // Q and O shards [B, H, Tq/N, d] (and the lse output), a f32 copy of Q
  // for the block calls when Q is narrower, f32 accumulators of O and lse
  // plus one block's f32 O and lse to merge, and K/V: the own shard and two
  // receive buffers (the block in use, the block arriving).
  const double q_rows = D(p.batch) * D(p.num_heads) * (D(p.q_len) / n);
  const double q_bytes = q_rows * D(p.head_dim) * D(DTypeSize(p.dtype));
  double memory = 2.0 * q_bytes;
  if (p.return_lse) memory += q_rows * kF32Bytes;
  if (p.dtype != DType::kF32) memory += q_rows * D(p.head_dim) * kF32Bytes;
  memory += 2.0 * q_rows * (D(p.head_dim) + 1.0) * kF32Bytes;
  memory += 3.0 * block_bytes;
  e.memory_bytes = Bytes(memory);
  Finish(single_s, &e);
  return e;
}

StrategyEstimate EstimateUlysses(const AttentionProblem& p, int ranks, const LinkModel& link,
                                 double flops_per_s) {
  StrategyEstimate e;
  e.ranks = ranks;
  if (!UsableInputs(ranks, link, flops_per_s) || !UlyssesShapeOk(p, ranks)) {
    e.strategy = Strategy::kAuto;
    return e;
  }
  e.strategy = Strategy::kUlysses;
  const double n = ranks;
  const double single_s = SingleRankSeconds(p, flops_per_s);
  // Whole-sequence attention on H/N heads: 1/N of the work on every rank,
  // balanced under any mask because every head sees the same mask.
  e.compute_s = single_s / n;
  // KV heads per rank after the reshard: G/N, or one copied head (N > G).
  const double kv_heads_local = std::max(1.0, D(p.num_kv_heads) / n);
  const double eq = D(DTypeSize(p.dtype));
  const double ekv = D(DTypeSize(p.kv_dtype));
  // Each all-to-all sends every other rank the piece it will own: its Tq/N
  // (Tk/N) rows of that rank's heads.
  const double q_piece = D(p.batch) * (D(p.num_heads) / n) * (D(p.q_len) / n) * D(p.head_dim) * eq;
  const double kv_piece = D(p.batch) * kv_heads_local * (D(p.kv_len) / n) * D(p.head_dim) * ekv;
  const double sent = (n - 1.0) * (2.0 * q_piece + 2.0 * kv_piece);  // Q, O; K, V
  e.bytes_sent = Bytes(sent);
  e.comm_s =
      ranks > 1 ? sent / link.bandwidth_bytes_per_s + kUlyssesAllToAlls * (n - 1.0) * link.latency_s
                : 0.0;
  e.exposed_comm_s = e.comm_s;  // the all-to-alls bracket the compute
  // The caller's sequence shards (Q, O [B, H, Tq/N, d]; K, V [B, G, Tk/N,
  // d]) plus their head-sharded copies (Q, O [B, H/N, Tq, d]; K, V
  // [B, G', Tk, d]) and lse; the all-to-alls pack in place.
  const double q_shard = D(p.batch) * D(p.num_heads) * (D(p.q_len) / n) * D(p.head_dim) * eq;
  const double kv_shard = D(p.batch) * D(p.num_kv_heads) * (D(p.kv_len) / n) * D(p.head_dim) * ekv;
  const double q_heads = D(p.batch) * (D(p.num_heads) / n) * D(p.q_len) * D(p.head_dim) * eq;
  const double kv_heads = D(p.batch) * kv_heads_local * D(p.kv_len) * D(p.head_dim) * ekv;
  double memory = 2.0 * (q_shard + kv_shard + q_heads + kv_heads);
  if (p.return_lse) memory += 2.0 * D(p.batch) * (D(p.num_heads) / n) * D(p.q_len) * kF32Bytes;
  e.memory_bytes = Bytes(memory);
  Finish(single_s, &e);
  return e;
}

Strategy ChooseStrategy(const AttentionProblem& p, int ranks, const LinkModel& link,
                        double flops_per_s, const absl::Status& ulysses_ok) {
  if (!ulysses_ok.ok()) return Strategy::kRing;
  const StrategyEstimate u = EstimateUlysses(p, ranks, link, flops_per_s);
  if (u.strategy != Strategy::kUlysses) return Strategy::kRing;
  const StrategyEstimate r = EstimateRing(p, ranks, link, flops_per_s);
  if (r.strategy != Strategy::kRing) return Strategy::kUlysses;
  return u.time_s < r.time_s ? Strategy::kUlysses : Strategy::kRing;
}

std::vector<ProjectionRow> Project(const AttentionProblem& layer,
                                   const std::vector<int64_t>& tokens,
                                   const std::vector<int>& ranks,
                                   const std::vector<double>& links_gbit, double latency_s,
                                   double flops_per_s) {
  std::vector<ProjectionRow> rows;
  rows.reserve(tokens.size() * ranks.size() * links_gbit.size());
  // Rows are grouped by (tokens, link), ranks ascending within a group, so
  // each group reads as one scaling curve.
  for (int64_t t : tokens) {
    AttentionProblem p = layer;
    p.q_len = t;
    p.kv_len = t;
    p.kv_lengths.clear();  // per-sequence lengths belong to the old length
    p.q_lengths.clear();
    for (double gbit : links_gbit) {
      LinkModel link;
      link.bandwidth_bytes_per_s = gbit * 1e9 / 8.0;
      link.latency_s = latency_s;
      for (int n : ranks) {
        ProjectionRow row;
        row.tokens = t;
        row.ranks = n;
        row.link_gbit_per_s = gbit;
        row.ring = EstimateRing(p, n, link, flops_per_s);
        row.ulysses = EstimateUlysses(p, n, link, flops_per_s);
        rows.push_back(row);
      }
    }
  }
  return rows;
}

std::string FormatProjection(const std::vector<ProjectionRow>& rows) {
  std::string out;
  absl::StrAppend(&out, absl::StrFormat("%7s %6s %5s %11s %11s %9s %10s %11s %10s %7s\n", "tokens",
                                        "ranks", "Gb/s", "ring_s", "exposed_s", "ring_eff%",
                                        "ring_MiB", "ulysses_s", "uly_MiB", "faster"));
  for (const ProjectionRow& r : rows) {
    const bool ring_ok = r.ring.strategy == Strategy::kRing;
    const bool uly_ok = r.ulysses.strategy == Strategy::kUlysses;
    const char* faster = "-";
    if (ring_ok && (!uly_ok || r.ring.time_s <= r.ulysses.time_s)) faster = "ring";
    if (uly_ok && (!ring_ok || r.ulysses.time_s < r.ring.time_s)) faster = "ulysses";
    absl::StrAppend(
        &out,
        absl::StrFormat("%7s %6d %5.4g %11s %11s %9.1f %10s %11s %10s %7s\n", TokensText(r.tokens),
                        r.ranks, r.link_gbit_per_s, ring_ok ? Seconds(r.ring.time_s) : "-",
                        ring_ok ? Seconds(r.ring.exposed_comm_s) : "-", 100.0 * r.ring.efficiency,
                        ring_ok ? MiB(r.ring.memory_bytes) : "-",
                        uly_ok ? Seconds(r.ulysses.time_s) : "-",
                        uly_ok ? MiB(r.ulysses.memory_bytes) : "-", faster));
  }
  // Per (tokens, link): the rank count from which every larger projected
  // count leaves ring communication exposed.
  std::vector<std::pair<int64_t, double>> groups;
  for (const ProjectionRow& r : rows) {
    const std::pair<int64_t, double> key(r.tokens, r.link_gbit_per_s);
    if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
  }
  for (const auto& [tokens, gbit] : groups) {
    std::vector<std::pair<int, bool>> hidden;  // (ranks, ring hides comm)
    for (const ProjectionRow& r : rows) {
      if (r.tokens == tokens && r.link_gbit_per_s == gbit && r.ring.strategy == Strategy::kRing) {
        hidden.emplace_back(r.ranks, r.ring.comm_hidden);
      }
    }
    if (hidden.empty()) continue;
    std::sort(hidden.begin(), hidden.end());
    size_t first_exposed = hidden.size();
    while (first_exposed > 0 && !hidden[first_exposed - 1].second) --first_exposed;
    const std::string where = absl::StrFormat("%s tokens, %.4g Gb/s: ", TokensText(tokens), gbit);
    if (first_exposed == hidden.size()) {
      absl::StrAppend(&out, where, "the ring hides its communication at every rank count up to ",
                      hidden.back().first, "\n");
    } else if (first_exposed == 0) {
      absl::StrAppend(&out, where, "the ring exposes communication from ", hidden.front().first,
                      " ranks (the smallest projected)\n");
    } else {
      absl::StrAppend(&out, where, "the ring hides its communication up to ",
                      hidden[first_exposed - 1].first, " ranks and exposes it from ",
                      hidden[first_exposed].first, " ranks\n");
    }
  }
  return out;
}

}  // namespace dist
}  // namespace attnkit

// ring_bench: measures on this machine what the distributed-attention cost
// model (distributed/cost_model.h) needs, then projects large runs from it.
//   (a) the transport between ranks 0 and 1 (Communicator::MeasureLink
//       ping-pong) at 64 KiB .. 64 MiB messages: latency and bandwidth;
//   (b) one ring block on a backend: B1 H32/G8 d128, `--block` queries x
//       `--block` keys, f32 Q (the ring widens Q), bf16 K/V, no mask, lse
//       returned; median of `--repeats` calls, as useful GFLOP/s;
//   (c) the projection of an H32/G8 d128 bf16 causal prefill layer for 128k
//       to 1M tokens on 8 to 1024 ranks at 100 and 400 Gb/s (latency
//       `--latency_us`), and on 2 and 4 ranks over the link measured in (a).
// Only rank 0 prints. Rank 0 times the block alone while the other ranks
// sleep, so the rate is one rank's with every CPU it may use; run with
// `--bind-to none` or mpirun binds rank 0 to one core:
//   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe
//     --mca btl self,vader --bind-to none -np 2 bazel-bin/distributed/ring_bench
// (as root; the two environment variables are Open MPI's consent to that).
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "backends/builtin.h"
#include "core/problem.h"
#include "core/status_macros.h"
#include "distributed/comm.h"
#include "distributed/cost_model.h"
#include "harness/problem_data.h"
#include "platform/median.h"

ABSL_FLAG(std::string, backend, "highway", "backend that computes the timed ring block");
ABSL_FLAG(int, threads, 0, "backend threads on rank 0; 0 = the CPUs rank 0 may run on");
ABSL_FLAG(int64_t, block, 1024, "query rows and key rows of the timed block");
ABSL_FLAG(int, repeats, 5, "timed block calls (the median is reported)");
ABSL_FLAG(int, link_repeats, 8, "ping-pongs per message size in the link measurement");
ABSL_FLAG(double, latency_us, 5.0, "one-way latency assumed for the 100 and 400 Gb/s fabrics");
ABSL_FLAG(double, gflops, 0.0,
          "per-rank compute rate to project with, GFLOP/s (e.g. an accelerator's); "
          "0 = the rate measured in (b)");
ABSL_FLAG(double, timeout_s, 120.0, "longest wait for any transfer or for rank 0's timing");

namespace attnkit {
namespace dist {
namespace {

using Clock = std::chrono::steady_clock;

// The measured figures rank 0 reports.
struct LinkPoint {
  int64_t bytes = 0;
  LinkModel link;
};

// CPUs this process may run on (mpirun may bind it to fewer than the machine has).
int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// (a) MeasureLink at each size; a collective (every rank calls it).
absl::StatusOr<std::vector<LinkPoint>> MeasureLinks(Communicator& comm, int repeats) {
  std::vector<LinkPoint> points;
  for (int64_t bytes : {int64_t{64} << 10, int64_t{1} << 20, int64_t{8} << 20, int64_t{64} << 20}) {
    ATTNKIT_ASSIGN_OR_RETURN(LinkModel link, comm.MeasureLink(bytes, repeats));
    points.push_back({bytes, link});
  }
  return points;
}

// The timed block problem: [1, 32, block, 128] f32 Q against [1, 8, block,
// 128] bf16 K/V, no mask, lse returned (the ring merges through it).
AttentionProblem BlockProblem(int64_t block) {
  AttentionProblem p = BasicProblem(1, 32, 8, block, block, 128);
  p.kv_dtype = DType::kBF16;
  p.return_lse = true;
  return p;
}

// (b) Median seconds of one block call on `backend_name` (rank 0 only).
absl::StatusOr<double> TimeBlock(const std::string& backend_name, int threads, int64_t block,
                                 int repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  ATTNKIT_ASSIGN_OR_RETURN(Backend * backend, GlobalRegistry().Find(backend_name));
  if (backend->UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(backend->SetNumThreads(threads));
  const AttentionProblem p = BlockProblem(block);
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  ATTNKIT_RETURN_IF_ERROR(backend->Supports(p));
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, 1));
  const AttentionArgs args = data.args();
  ATTNKIT_RETURN_IF_ERROR(backend->Forward(p, args));  // warm-up: pools, caches
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    ATTNKIT_RETURN_IF_ERROR(backend->Forward(p, args));
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return Median(seconds);
}

// The projected layer: H32/G8 d128, bf16 Q/K/V/O, causal self-attention.
AttentionProblem Layer() {
  AttentionProblem p = BasicProblem(1, 32, 8, 1024, 1024, 128);
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kBF16;
  p.mask = MaskKind::kCausal;
  return p;
}

void PrintReport(int ranks, const std::string& backend, int threads, int cpus,
                 const std::vector<LinkPoint>& links, int64_t block, int repeats, double block_s) {
  const std::vector<int64_t> tokens = {int64_t{128} << 10, int64_t{256} << 10, int64_t{512} << 10,
                                       int64_t{1} << 20};
  std::printf("ring_bench: %d ranks; backend %s, %d threads on rank 0 (%d CPUs allowed)\n", ranks,
              backend.c_str(), threads, cpus);
  const unsigned machine_cpus = std::thread::hardware_concurrency();
  if (machine_cpus > 0 && static_cast<unsigned>(cpus) < machine_cpus) {
    std::printf(
        "    note: rank 0 may use %d of the machine's %u CPUs (mpirun binds ranks to "
        "cores; add --bind-to none), so (b) is below one rank's rate\n",
        cpus, machine_cpus);
  }
  std::printf("\n");

  std::printf("(a) transport, rank 0 <-> rank 1 (MeasureLink ping-pong, %s)\n",
              ranks >= 2 ? "one direction" : "needs 2 ranks: not measured");
  if (!links.empty()) {
    std::printf("%12s %12s %10s %10s\n", "message", "latency_us", "GB/s", "Gb/s");
    for (const LinkPoint& l : links) {
      std::printf("%8lld KiB %12.2f %10.2f %10.1f\n", static_cast<long long>(l.bytes >> 10),
                  l.link.latency_s * 1e6, l.link.bandwidth_bytes_per_s * 1e-9,
                  l.link.bandwidth_bytes_per_s * 8e-9);
    }
  }

  const AttentionProblem bp = BlockProblem(block);
  const double block_flops = UsefulFlops(bp);
  const double measured = block_flops / block_s;
  std::printf(
      "\n(b) compute: one ring block, B1 H32/G8 d128, %lld queries x %lld keys, f32 Q, bf16 K/V, "
      "no mask\n    median of %d calls: %.2f ms for %.3f GFLOP (4 d pairs) = %.1f GFLOP/s\n",
      static_cast<long long>(block), static_cast<long long>(block), repeats, block_s * 1e3,
      block_flops * 1e-9, measured * 1e-9);

  const double override_gflops = absl::GetFlag(FLAGS_gflops);
  const double rate = override_gflops > 0 ? override_gflops * 1e9 : measured;
  const double latency_s = absl::GetFlag(FLAGS_latency_us) * 1e-6;
  std::printf(
      "\n(c) projection: H32/G8 d128 bf16 causal prefill layer (forward), %.1f GFLOP/s per rank "
      "(%s), link latency %g us\n    ring_s: time per layer; exposed_s: ring communication not "
      "hidden behind compute; ring_eff%%: one rank's compute time / (ranks x ring_s); MiB: per "
      "rank; ulysses '-': 32 heads do not split over that many ranks; model: "
      "distributed/README.md\n",
      rate * 1e-9, override_gflops > 0 ? "--gflops" : "measured in (b)",
      absl::GetFlag(FLAGS_latency_us));
  std::printf("%s", FormatProjection(Project(Layer(), tokens, {8, 16, 32, 64, 128, 256, 512, 1024},
                                             {100.0, 400.0}, latency_s, rate))
                        .c_str());

  if (!links.empty()) {
    // The measured link of this run: bandwidth at the largest message,
    // latency the smallest seen (every MeasureLink call measures it).
    LinkModel local = links.back().link;
    for (const LinkPoint& l : links) local.latency_s = std::min(local.latency_s, l.link.latency_s);
    const double gbit = local.bandwidth_bytes_per_s * 8e-9;
    std::printf("\n    the link measured in (a): %.1f Gb/s, latency %.2f us, on 2 and 4 ranks\n",
                gbit, local.latency_s * 1e6);
    std::printf(
        "%s",
        FormatProjection(Project(Layer(), tokens, {2, 4}, {gbit}, local.latency_s, rate)).c_str());
  }
}

absl::Status Run(Communicator& comm) {
  const int cpus = AllowedCpus();
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : cpus;
  const int64_t block = absl::GetFlag(FLAGS_block);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  ATTNKIT_RETURN_IF_ERROR(RequireRange("block", block, 16, 16384));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("repeats", repeats, 1, 1000));
  ATTNKIT_RETURN_IF_ERROR(RequireRange("link_repeats", absl::GetFlag(FLAGS_link_repeats), 1, 1000));

  std::vector<LinkPoint> links;
  if (comm.size() >= 2) {
    ATTNKIT_ASSIGN_OR_RETURN(links, MeasureLinks(comm, absl::GetFlag(FLAGS_link_repeats)));
  }

  // Rank 0 times the block while the others sleep in the barrier; then all
  // agree on the outcome, so a failure on rank 0 ends every rank cleanly.
  double block_s = 0.0;
  absl::Status local = absl::OkStatus();
  if (comm.rank() == 0) {
    absl::StatusOr<double> s = TimeBlock(absl::GetFlag(FLAGS_backend), threads, block, repeats);
    if (s.ok()) {
      block_s = *s;
    } else {
      local = s.status();
    }
  }
  // The Communicator's waits sleep after 2 ms, leaving rank 0 the CPUs.
  ATTNKIT_RETURN_IF_ERROR(comm.Barrier("block timing on rank 0"));
  ATTNKIT_RETURN_IF_ERROR(comm.Agree(local));

  if (comm.rank() == 0) {
    PrintReport(comm.size(), absl::GetFlag(FLAGS_backend), threads, cpus, links, block, repeats,
                block_s);
  }
  return comm.Barrier("end of ring_bench");
}

}  // namespace
}  // namespace dist
}  // namespace attnkit

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  absl::SetProgramUsageMessage(
      "Measures the link and one ring block's compute, then prints the distributed-attention "
      "projection. Run under mpirun with 2 ranks (see distributed/README.md).");
  absl::ParseCommandLine(argc, argv);
  attnkit::dist::CommOptions options;
  options.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  absl::StatusOr<attnkit::dist::Communicator> comm =
      attnkit::dist::Communicator::Wrap(MPI_COMM_WORLD, options);
  if (!comm.ok()) {
    std::fprintf(stderr, "ring_bench: %s\n", std::string(comm.status().message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (absl::Status s = attnkit::dist::Run(*comm); !s.ok()) comm->Abort(s);
  MPI_Finalize();
  return 0;
}

// `attnkit ring`: one attention problem sharded over the ranks of an MPI job
// (distributed/ring_attention.h), run under `mpirun -np N attnkit ring ...` or alone
// as a one-rank job (Open MPI's singleton init). It is the only command that
// initialises MPI.
#ifndef ATTNKIT_TOOLS_CLI_RING_COMMAND_H_
#define ATTNKIT_TOOLS_CLI_RING_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "plugin/registry.h"
#include "tools/cli/commands.h"

namespace attnkit {

// `attnkit ring` beyond the shared options (config, backend, threads, grad).
struct RingOptions {
  std::string strategy = "ring";  // ring | ulysses | auto (distributed/strategy.h)
  bool check = false;             // gather on rank 0 and compare with the fp64 reference
  double timeout_s = 60.0;        // longest wait on any one transfer or collective
  int repeats = 1;                // runs; the table shows the fastest
  // For tests: "stall:R" (rank R sleeps far past the timeout before the
  // ring starts) or "exit:R" (rank R calls _exit(3) there); "" = none.
  std::string inject_fault;
};

// Runs the problem of options.config on every rank of MPI_COMM_WORLD: MPI
// init (MPI_THREAD_FUNNELED), link measurement (N > 1), strategy, the
// per-rank memory budget agreed by all ranks before anything is allocated,
// this rank's shard (distributed/shard_data.h), Forward (and Backward with --grad),
// with --check the gathered output (and gradients) against the fp64 oracle
// on rank 0; rank 0 prints the per-rank table to `out`. Returns OK after
// MPI_Finalize, or an error found before MPI started (a bad flag). Any
// error after that prints "attnkit ring: rank R: <status>" on stderr and
// ends the whole job (Communicator::Abort): it does not return.
absl::Status RingCommand(const BackendRegistry& registry, const CliOptions& options,
                         const RingOptions& ring, std::ostream& out);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_RING_COMMAND_H_

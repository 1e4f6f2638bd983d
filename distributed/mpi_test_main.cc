#include "distributed/mpi_test_main.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"

namespace attnkit {
namespace dist {

absl::Status ExpectationFailed(const char* file, int line, absl::string_view condition,
                               absl::string_view message) {
  return absl::InternalError(
      absl::StrCat(file, ":", line, ": expected ", condition, ": ", message));
}

int RunMpiChecks(int argc, char** argv, const std::vector<MpiCheck>& checks, CommOptions options) {
  MPI_Init(&argc, &argv);
  absl::StatusOr<Communicator> wrapped = Communicator::Wrap(MPI_COMM_WORLD, options);
  if (!wrapped.ok()) {
    std::fprintf(stderr, "RunMpiChecks: %s\n", wrapped.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  Communicator& comm = *wrapped;
  if (comm.rank() == 0) {
    std::printf("[ RUN ] %zu checks on %d ranks\n", checks.size(), comm.size());
    std::fflush(stdout);
  }
  int passed = 0;
  for (const MpiCheck& check : checks) {
    comm.ResetStats();
    const auto start = std::chrono::steady_clock::now();
    const absl::Status local = check.body(comm);
    if (!local.ok()) {
      std::fprintf(stderr, "[rank %d] FAIL %s: %s\n", comm.rank(), check.name.c_str(),
                   local.ToString().c_str());
      std::fflush(stderr);
    }
    const absl::Status agreed = comm.Agree(local);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (agreed.code() == absl::StatusCode::kDeadlineExceeded &&
        absl::StrContains(agreed.message(), ": Agree: ")) {
      // This rank could not hear from the others: no common verdict.
      comm.Abort(agreed, 1);
    }
    if (!agreed.ok()) {
      if (comm.rank() == 0) {
        std::printf("[ FAIL ] %s (%.0f ms): %s\n", check.name.c_str(), ms,
                    agreed.ToString().c_str());
        const int skipped = static_cast<int>(checks.size()) - passed - 1;
        if (skipped > 0) std::printf("%d later checks not run\n", skipped);
        std::fflush(stdout);
      }
      MPI_Finalize();
      return 1;
    }
    ++passed;
    if (comm.rank() == 0) {
      std::printf("[ OK ] %s (%.0f ms)\n", check.name.c_str(), ms);
      std::fflush(stdout);
    }
  }
  if (comm.rank() == 0) {
    std::printf("PASSED: %d checks on %d ranks\n", passed, comm.size());
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}

int RunMpiChecks(int argc, char** argv, std::function<absl::Status(Communicator&)> body,
                 CommOptions options) {
  return RunMpiChecks(argc, argv, {{"main", std::move(body)}}, options);
}

}  // namespace dist
}  // namespace attnkit

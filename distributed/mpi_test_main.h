// The main() of an MPI test program: a tiny test runner whose checks run on
// every rank of MPI_COMM_WORLD and whose verdict every rank agrees on.
//
//   #include "distributed/mpi_test_main.h"
//
//   absl::Status RingExchange(attnkit::dist::Communicator& comm) {
//     ...                                   // runs on every rank
//     ATTNKIT_MPI_EXPECT(got == want, "rank ", comm.rank(), " got ", got);
//     return absl::OkStatus();
//   }
//
//   int main(int argc, char** argv) {
//     return attnkit::dist::RunMpiChecks(argc, argv, {{"ring_exchange", RingExchange}});
//   }
//
// and in BUILD (distributed/mpi_test.bzl):
//
//   cc_binary(name = "foo_main", testonly = True, srcs = ["foo_test.cc"],
//             deps = ["//distributed:mpi_test_main", ...])
//   mpi_test(name = "foo_test", binary = ":foo_main")      # -np 2, 3 and 4
//
// RunMpiChecks calls MPI_Init, wraps MPI_COMM_WORLD in a Communicator
// (`options`: its deadline), then runs the checks in order. For each, every
// rank runs the body (stats reset before it); a rank whose body fails prints
// "[rank R] FAIL <check>: <status>" to stderr; then all ranks Agree, so every
// rank sees the same verdict (the lowest failing rank's status, "rank R: ..."),
// and rank 0 prints "[ OK ] <check> (T ms)" or "[ FAIL ] <check>: ...". The
// first failing check ends the run (later ones would meet its leftover
// messages). It returns 0 when every check passed on every rank, else 1, the
// same on every rank, after MPI_Finalize; mpirun then exits with it. A rank
// whose Agree times out (another rank is stuck or gone) calls MPI_Abort.
//
// Bodies must be collective-safe: every rank runs every check, and a body
// that returns early on one rank must not leave other ranks waiting without
// a deadline (use the Communicator's waits, never blocking MPI calls).
// Checks that need a different deadline Wrap comm.comm() again with their
// own CommOptions.
#ifndef ATTNKIT_DISTRIBUTED_MPI_TEST_MAIN_H_
#define ATTNKIT_DISTRIBUTED_MPI_TEST_MAIN_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "distributed/comm.h"

namespace attnkit {
namespace dist {

struct MpiCheck {
  std::string name;
  std::function<absl::Status(Communicator&)> body;
};

int RunMpiChecks(int argc, char** argv, const std::vector<MpiCheck>& checks,
                 CommOptions options = {});
// One unnamed check ("main").
int RunMpiChecks(int argc, char** argv, std::function<absl::Status(Communicator&)> body,
                 CommOptions options = {});

// Internal "file:line: expected <condition>: <message>".
absl::Status ExpectationFailed(const char* file, int line, absl::string_view condition,
                               absl::string_view message);

}  // namespace dist
}  // namespace attnkit

// Returns ExpectationFailed(...) from the enclosing function (which returns
// absl::Status or StatusOr) when `condition` is false. The message (at least
// one argument) is absl::StrCat of the rest: ATTNKIT_MPI_EXPECT(n == 3, "n = ", n).
#define ATTNKIT_MPI_EXPECT(condition, ...)                                      \
  do {                                                                          \
    if (!(condition)) {                                                         \
      return ::attnkit::dist::ExpectationFailed(__FILE__, __LINE__, #condition, \
                                                ::absl::StrCat(__VA_ARGS__));   \
    }                                                                           \
  } while (0)

#endif  // ATTNKIT_DISTRIBUTED_MPI_TEST_MAIN_H_

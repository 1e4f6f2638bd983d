// Fault injection for comm_fault_test and comm_stall_test:
//   comm_fault_main exit    rank 1 dies (_exit(3), no MPI_Finalize)
//   comm_fault_main stall   rank 1 stops talking (sleeps 120 s)
// while rank 0 waits on a receive from it with a 5 s deadline and the other
// ranks wait in a barrier. Whichever comes first, mpirun killing the job for
// the dead rank or rank 0 reporting its DeadlineExceeded and aborting, the
// job must end nonzero, not hang (mpi_run_test.sh checks).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "distributed/comm.h"

int main(int argc, char** argv) {
  using attnkit::dist::Communicator;
  MPI_Init(&argc, &argv);
  const bool stall = argc > 1 && std::strcmp(argv[1], "stall") == 0;
  if (argc < 2 || (!stall && std::strcmp(argv[1], "exit") != 0)) {
    std::fprintf(stderr, "usage: comm_fault_main exit|stall\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  absl::StatusOr<Communicator> wrapped = Communicator::Wrap(MPI_COMM_WORLD, {5.0});
  if (!wrapped.ok()) {
    std::fprintf(stderr, "%s\n", wrapped.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Communicator& comm = *wrapped;
  const absl::Status ready = comm.Barrier("start");
  if (!ready.ok()) comm.Abort(ready);
  if (comm.rank() == 1 && stall) {
    std::fprintf(stderr, "comm_fault: rank 1 stops communicating for 120 s\n");
    std::fflush(stderr);
    sleep(120);
  } else if (comm.rank() == 1) {
    std::fprintf(stderr, "comm_fault: rank 1 exits with code 3 without MPI_Finalize\n");
    std::fflush(stderr);
    _exit(3);
  }
  absl::Status status;
  int value = 0;
  absl::StatusOr<Communicator::Request> recv;  // pending when the job aborts
  if (comm.rank() == 0) {
    recv = comm.Irecv(&value, sizeof(value), 1, 0);
    status = recv.ok() ? comm.Wait(*recv, "the message rank 1 never sends") : recv.status();
  } else {
    // Ranks 2 and up wait longer, so rank 0's report (naming rank 1) usually
    // comes first; under load either may, and both are clear errors.
    absl::StatusOr<Communicator> patient = Communicator::Wrap(MPI_COMM_WORLD, {15.0});
    status = patient.ok() ? patient->Barrier("waiting for rank 1") : patient.status();
  }
  if (!status.ok()) comm.Abort(status, 2);
  // Reaching this means a wait on a dead rank succeeded.
  std::fprintf(stderr, "comm_fault: rank %d: FAIL: a wait on the dead rank 1 returned OK\n",
               comm.rank());
  MPI_Finalize();
  return 1;
}

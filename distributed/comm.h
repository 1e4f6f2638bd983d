// Communicator: the MPI operations distributed attention makes, each bounded
// by a deadline, with MPI errors returned as absl::Status.
//
// Every wait polls (MPI_Test / non-blocking collectives) until the transfer
// completes or `timeout_s` passes, so a peer that stalls or dies becomes
// DeadlineExceeded "rank R: <what>: no progress from rank P within T s" on
// this rank instead of a hang. The communicator's error handler is set to
// MPI_ERRORS_RETURN, so a failed MPI call is an Internal status naming the
// call and MPI's error string. After an error the job cannot continue
// (MPI has no recovery): callers report it and call Abort.
//
// Messages larger than 1 GiB are split into several MPI messages with the
// same tag (MPI keeps their order), so byte counts are int64_t.
#ifndef ATTNKIT_DISTRIBUTED_COMM_H_
#define ATTNKIT_DISTRIBUTED_COMM_H_

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnkit {
namespace dist {

struct CommOptions {
  // Longest wait for any one transfer or collective, in seconds (> 0).
  double timeout_s = 60.0;
};

// Traffic and waiting seen by this rank since the last ResetStats().
struct CommStats {
  int64_t bytes_sent = 0;  // point-to-point and this rank's collective share
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
  double wait_s = 0.0;  // time spent inside Wait / WaitAll / collectives
};

// Link figures for the cost models (MeasureLink).
struct LinkModel {
  double bandwidth_bytes_per_s = 0.0;  // one direction, one pair of ranks
  double latency_s = 0.0;              // one small message, one way
};

class Communicator {
 public:
  // A posted non-blocking send or receive; complete it with Wait/WaitAll.
  // Move-only; destroying an incomplete request is a programming error the
  // destructor reports on stderr (it cannot wait without a deadline).
  class Request {
   public:
    Request() = default;
    Request(Request&&) noexcept;
    Request& operator=(Request&&) noexcept;
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    ~Request();

    bool pending() const { return !parts_.empty(); }

   private:
    friend class Communicator;
    std::vector<MPI_Request> parts_;
    int peer_ = -1;
    int tag_ = 0;
    int64_t bytes_ = 0;
    bool is_send_ = false;
  };

  // Wraps `comm` (not owned; MPI is initialised and not finalised). Sets
  // MPI_ERRORS_RETURN on it. InvalidArgument for timeout_s <= 0.
  static absl::StatusOr<Communicator> Wrap(MPI_Comm comm, CommOptions options = {});

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return options_.timeout_s; }

  // Non-blocking point-to-point of `bytes` bytes. `data` must stay valid
  // (and, for Irecv, unread) until the request completes.
  absl::StatusOr<Request> Isend(const void* data, int64_t bytes, int dest, int tag);
  absl::StatusOr<Request> Irecv(void* data, int64_t bytes, int source, int tag);
  // Completes `request` (a no-op when it is not pending). `what` names the
  // transfer in a timeout error ("K/V block of step 3").
  absl::Status Wait(Request& request, absl::string_view what);
  absl::Status WaitAll(std::vector<Request>& requests, absl::string_view what);

  // Collectives with the same deadline. Buffers are bytes.
  absl::Status Barrier(absl::string_view what);
  absl::Status Broadcast(void* data, int64_t bytes, int root, absl::string_view what);
  // Rank i's `bytes` of `send` go to rank `root`'s recv at i * bytes (recv
  // is only read on root and holds size() * bytes there).
  absl::Status Gather(const void* send, void* recv, int64_t bytes, int root,
                      absl::string_view what);
  absl::Status AllGather(const void* send, void* recv, int64_t bytes, absl::string_view what);
  // send_counts[i] bytes at send_offsets[i] go to rank i; recv_counts[i]
  // bytes from rank i land at recv_offsets[i] (all in bytes, each < 2^31).
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& send_offsets, void* recv,
                         const std::vector<int64_t>& recv_counts,
                         const std::vector<int64_t>& recv_offsets, absl::string_view what);
  absl::StatusOr<double> MaxOverRanks(double value, absl::string_view what);
  absl::StatusOr<double> SumOverRanks(double value, absl::string_view what);

  // Every rank passes its own status; every rank gets OK when all were OK,
  // else the lowest failing rank's code and message prefixed "rank R: " (the
  // same on every rank). A collective: every rank must call it.
  absl::Status Agree(const absl::Status& local);

  // Measures the link between ranks 0 and 1 (ping-pong: small messages for
  // latency, `bytes` messages for bandwidth) and broadcasts the result, so
  // every rank gets the same figures. A collective; a single rank measures
  // nothing and returns zeros.
  absl::StatusOr<LinkModel> MeasureLink(int64_t bytes = int64_t{8} << 20, int repeats = 8);

  // Ends the whole job (MPI_Abort) after printing `status` to stderr.
  [[noreturn]] void Abort(const absl::Status& status, int exit_code = 1);

  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats(); }

 private:
  Communicator(MPI_Comm comm, int rank, int size, CommOptions options)
      : comm_(comm), rank_(rank), size_(size), options_(options) {}
  // MaxOverRanks and SumOverRanks: an all-reduce of one double with `op`.
  absl::StatusOr<double> ReduceOverRanks(double value, MPI_Op op, absl::string_view what);
  // Polls `requests` until all complete or the deadline passes.
  absl::Status Poll(std::vector<MPI_Request>& requests, int peer, absl::string_view what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  CommOptions options_;
  CommStats stats_;
};

// Internal "MPI_<call> failed: <MPI's error string>" for a non-success code.
absl::Status MpiStatus(int code, absl::string_view call);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_COMM_H_

#include "distributed/comm.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "distributed/comm_testing.h"
#include "platform/median.h"

namespace attnkit {
namespace dist {
namespace testing {
namespace {
std::atomic<int64_t> max_message_bytes{kDefaultMaxMessageBytes};
}  // namespace

int64_t MaxMessageBytes() { return max_message_bytes.load(std::memory_order_relaxed); }

void SetMaxMessageBytes(int64_t bytes) {
  max_message_bytes.store(std::clamp(bytes, int64_t{1}, kDefaultMaxMessageBytes),
                          std::memory_order_relaxed);
}
}  // namespace testing

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// MeasureLink's ping-pong tag (MPI guarantees MPI_TAG_UB >= 32767).
constexpr int kLinkTag = 32760;

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return absl::StrCat("MPI error code ", code);
  }
  return std::string(text, length);
}

// "rank R: <what>: <message>" with the status's code.
absl::Status Prefixed(int rank, absl::string_view what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("rank ", rank, ": ", what, ": ", status.message()));
}

// A message of `bytes` travels as ceil(bytes / MaxMessageBytes()) MPI
// messages (one, empty, for 0 bytes): [offset, offset + length) of piece i.
int64_t PieceCount(int64_t bytes) {
  const int64_t max = testing::MaxMessageBytes();
  return bytes == 0 ? 1 : (bytes + max - 1) / max;
}
int64_t PieceOffset(int64_t i) { return i * testing::MaxMessageBytes(); }
int PieceLength(int64_t bytes, int64_t i) {
  return static_cast<int>(std::min(testing::MaxMessageBytes(), bytes - PieceOffset(i)));
}

// Between MPI_Test calls: spin for the first 50 us (a neighbour's message is
// usually that close), yield the core until 2 ms (ranks may outnumber cores),
// then sleep 1/16 of the time waited so far (at most 1 ms), which keeps the
// added latency of a long wait under ~6%.
void Pause(double waited_s) {
  if (waited_s < 50e-6) return;
  if (waited_s < 2e-3) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(1e-3, waited_s / 16)));
}

// One MPI request inside a wait: the rank it waits on (-1: the other ranks,
// for collectives) and, for a receive, the bytes that must arrive (else -1).
struct PartInfo {
  int peer = -1;
  int64_t expected_bytes = -1;
};

std::string PeerName(int peer) {
  return peer >= 0 ? absl::StrCat("rank ", peer) : std::string("the other ranks");
}

// A completed receive must carry exactly the bytes posted: MPI accepts a
// shorter message silently (a longer one is MPI_ERR_TRUNCATE).
absl::Status CheckReceived(const MPI_Status& status, const PartInfo& info) {
  // An already-completed (null) request reports an empty status.
  if (info.expected_bytes < 0 || status.MPI_SOURCE == MPI_ANY_SOURCE) return absl::OkStatus();
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  if (count != info.expected_bytes) {
    return absl::InternalError(absl::StrFormat(
        "received %d bytes from rank %d, expected %d (the sender's message is shorter)", count,
        info.peer, info.expected_bytes));
  }
  return absl::OkStatus();
}

struct PollOutcome {
  absl::Status error;  // an MPI failure or a short receive (no rank prefix)
  bool timed_out = false;
  size_t first_pending = 0;  // on timeout, the first request still incomplete
};

// Polls `requests` until every one completes (each becomes MPI_REQUEST_NULL)
// or `timeout_s` passes; on timeout the ones that did complete are null too.
PollOutcome PollParts(std::vector<MPI_Request>& requests, const std::vector<PartInfo>& info,
                      double timeout_s) {
  PollOutcome outcome;
  const Clock::time_point start = Clock::now();
  std::vector<MPI_Status> statuses(requests.size());
  while (true) {
    int done = 0;
    const int code =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, statuses.data());
    if (code == MPI_ERR_IN_STATUS) {
      for (size_t i = 0; i < statuses.size(); ++i) {
        const int part_code = statuses[i].MPI_ERROR;
        if (part_code != MPI_SUCCESS && part_code != MPI_ERR_PENDING) {
          outcome.error = absl::InternalError(
              absl::StrCat("MPI_Testall failed on the transfer with ", PeerName(info[i].peer), ": ",
                           MpiErrorString(part_code)));
          return outcome;
        }
      }
    }
    if (code != MPI_SUCCESS) {
      outcome.error = MpiStatus(code, "Testall");
      return outcome;
    }
    if (done) {
      for (size_t i = 0; i < statuses.size(); ++i) {
        outcome.error = CheckReceived(statuses[i], info[i]);
        if (!outcome.error.ok()) return outcome;
      }
      return outcome;
    }
    const double waited = SecondsSince(start);
    if (waited >= timeout_s) break;
    Pause(waited);
  }
  // Out of time: find the first request still pending (MPI_Testall is all or
  // nothing), completing the others.
  bool any_pending = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    int done = 0;
    MPI_Status status;
    const int code = MPI_Test(&requests[i], &done, &status);
    if (code != MPI_SUCCESS) {
      outcome.error =
          absl::InternalError(absl::StrCat("MPI_Test failed on the transfer with ",
                                           PeerName(info[i].peer), ": ", MpiErrorString(code)));
      return outcome;
    }
    if (done) {
      outcome.error = CheckReceived(status, info[i]);
      if (!outcome.error.ok()) return outcome;
    } else if (!any_pending) {
      any_pending = true;
      outcome.first_pending = i;
    }
  }
  outcome.timed_out = any_pending;
  return outcome;
}

// The status a wait on `what` ends with.
absl::Status Describe(int rank, const PollOutcome& outcome, const std::vector<PartInfo>& info,
                      absl::string_view what, double timeout_s) {
  if (!outcome.error.ok()) return Prefixed(rank, what, outcome.error);
  if (!outcome.timed_out) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrFormat("rank %d: %s: no progress from %s within %g s", rank, what,
                      PeerName(info[outcome.first_pending].peer), timeout_s));
}

absl::Status CheckBytes(int64_t bytes, const void* data, absl::string_view name) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bytes (", bytes, ") must be >= 0"));
  }
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is null with bytes = ", bytes, " (must point to the data)"));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(int value, int size, absl::string_view name) {
  if (value < 0 || value >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " (", value, ") must be a rank in [0, ", size, ")"));
  }
  return absl::OkStatus();
}

// The arguments of Isend / Irecv; `peer_name` is "dest" or "source".
absl::Status CheckTransfer(MPI_Comm comm, int size, const void* data, int64_t bytes, int peer,
                           absl::string_view peer_name, int tag) {
  ATTNKIT_RETURN_IF_ERROR(CheckBytes(bytes, data, "data"));
  ATTNKIT_RETURN_IF_ERROR(CheckRank(peer, size, peer_name));
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found);
  const int max_tag = found && tag_ub != nullptr ? *tag_ub : 32767;
  if (tag < 0 || tag > max_tag) {
    return absl::InvalidArgumentError(
        absl::StrCat("tag (", tag, ") must be in [0, MPI_TAG_UB = ", max_tag, "]"));
  }
  return absl::OkStatus();
}

// Derived datatypes made for one operation: MPI keeps them alive for the
// operations already posted with them, so they are freed right after posting.
class OwnedTypes {
 public:
  OwnedTypes() = default;
  OwnedTypes(const OwnedTypes&) = delete;
  OwnedTypes& operator=(const OwnedTypes&) = delete;
  ~OwnedTypes() {
    for (MPI_Datatype& type : types_) MPI_Type_free(&type);
  }
  // `length` bytes starting `displacement` bytes into the buffer (64-bit).
  absl::StatusOr<MPI_Datatype> Block(int length, MPI_Aint displacement) {
    MPI_Datatype type;
    ATTNKIT_RETURN_IF_ERROR(
        MpiStatus(MPI_Type_create_hindexed(1, &length, &displacement, MPI_BYTE, &type),
                  "Type_create_hindexed"));
    return Commit(type);
  }
  // `length` contiguous bytes whose extent is `stride`: rank i's block of a
  // gather lands at i * stride.
  absl::StatusOr<MPI_Datatype> Strided(int length, MPI_Aint stride) {
    MPI_Datatype contiguous;
    ATTNKIT_RETURN_IF_ERROR(
        MpiStatus(MPI_Type_contiguous(length, MPI_BYTE, &contiguous), "Type_contiguous"));
    MPI_Datatype resized;
    const int code = MPI_Type_create_resized(contiguous, 0, stride, &resized);
    MPI_Type_free(&contiguous);
    ATTNKIT_RETURN_IF_ERROR(MpiStatus(code, "Type_create_resized"));
    return Commit(resized);
  }

 private:
  absl::StatusOr<MPI_Datatype> Commit(MPI_Datatype type) {
    types_.push_back(type);
    ATTNKIT_RETURN_IF_ERROR(MpiStatus(MPI_Type_commit(&types_.back()), "Type_commit"));
    return types_.back();
  }
  std::vector<MPI_Datatype> types_;
};

// Agree's record: a status code and the first 480 bytes of its message.
struct AgreeRecord {
  int32_t code;
  int32_t length;
  char message[480];
};

}  // namespace

absl::Status MpiStatus(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(absl::StartsWith(call, "MPI_") ? "" : "MPI_", call,
                                          " failed: ", MpiErrorString(code)));
}

// ---------------------------------------------------------------- Request

Communicator::Request::Request(Request&& other) noexcept
    : parts_(std::move(other.parts_)),
      peer_(other.peer_),
      tag_(other.tag_),
      bytes_(other.bytes_),
      is_send_(other.is_send_) {
  other.parts_.clear();
}

Communicator::Request& Communicator::Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    Request old(std::move(*this));  // cancels what this held, if still pending
    parts_ = std::move(other.parts_);
    other.parts_.clear();
    peer_ = other.peer_;
    tag_ = other.tag_;
    bytes_ = other.bytes_;
    is_send_ = other.is_send_;
  }
  return *this;
}

// Cancels an incomplete transfer: a receive not yet matched is withdrawn; a
// send may still go out (Open MPI cannot cancel sends), so its buffer must
// outlive the job. Both are then freed so MPI_Finalize does not wait on them.
Communicator::Request::~Request() {
  if (std::all_of(parts_.begin(), parts_.end(),
                  [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
    return;
  }
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int world_rank = -1;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::fprintf(stderr,
               "attnkit dist: rank %d: warning: a pending %s rank %d (tag %d, %lld bytes) was "
               "destroyed before it completed; cancelling it\n",
               world_rank, is_send_ ? "send to" : "receive from", peer_, tag_,
               static_cast<long long>(bytes_));
  if (!initialized || finalized) return;
  for (MPI_Request& r : parts_) {
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  }
  // A cancelled receive completes at once; allow 100 ms, then free the rest.
  const Clock::time_point start = Clock::now();
  bool pending = true;
  while (pending && SecondsSince(start) < 0.1) {
    pending = false;
    for (MPI_Request& r : parts_) {
      int done = 1;
      if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      pending |= !done;
    }
    if (pending) sched_yield();
  }
  for (MPI_Request& r : parts_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
}

// ----------------------------------------------------------- Communicator

absl::StatusOr<Communicator> Communicator::Wrap(MPI_Comm comm, CommOptions options) {
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CommOptions.timeout_s (%g) must be a finite number of seconds > 0", options.timeout_s));
  }
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Communicator::Wrap: MPI is ", finalized ? "already finalized"
                                                 : "not "
                                                   "initialized (call MPI_Init first)"));
  }
  if (comm == MPI_COMM_NULL) {
    return absl::InvalidArgumentError("Communicator::Wrap: comm is MPI_COMM_NULL");
  }
  ATTNKIT_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "Comm_set_errhandler"));
  int rank = 0;
  int size = 1;
  ATTNKIT_RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(comm, &rank), "Comm_rank"));
  ATTNKIT_RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(comm, &size), "Comm_size"));
  return Communicator(comm, rank, size, options);
}

absl::StatusOr<Communicator::Request> Communicator::Isend(const void* data, int64_t bytes, int dest,
                                                          int tag) {
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, "Isend", CheckTransfer(comm_, size_, data, bytes, dest, "dest", tag)));
  Request request;
  request.peer_ = dest;
  request.tag_ = tag;
  request.bytes_ = bytes;
  request.is_send_ = true;
  const char* bytes_ptr = static_cast<const char*>(data);
  for (int64_t i = 0; i < PieceCount(bytes); ++i) {
    MPI_Request part;
    ATTNKIT_RETURN_IF_ERROR(
        Prefixed(rank_, "Isend",
                 MpiStatus(MPI_Isend(bytes_ptr + PieceOffset(i), PieceLength(bytes, i), MPI_BYTE,
                                     dest, tag, comm_, &part),
                           "Isend")));
    request.parts_.push_back(part);
  }
  return request;
}

absl::StatusOr<Communicator::Request> Communicator::Irecv(void* data, int64_t bytes, int source,
                                                          int tag) {
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, "Irecv", CheckTransfer(comm_, size_, data, bytes, source, "source", tag)));
  Request request;
  request.peer_ = source;
  request.tag_ = tag;
  request.bytes_ = bytes;
  request.is_send_ = false;
  char* bytes_ptr = static_cast<char*>(data);
  for (int64_t i = 0; i < PieceCount(bytes); ++i) {
    MPI_Request part;
    ATTNKIT_RETURN_IF_ERROR(
        Prefixed(rank_, "Irecv",
                 MpiStatus(MPI_Irecv(bytes_ptr + PieceOffset(i), PieceLength(bytes, i), MPI_BYTE,
                                     source, tag, comm_, &part),
                           "Irecv")));
    request.parts_.push_back(part);
  }
  return request;
}

absl::Status Communicator::Wait(Request& request, absl::string_view what) {
  if (!request.pending()) return absl::OkStatus();
  std::vector<Request> one;
  one.push_back(std::move(request));
  absl::Status status = WaitAll(one, what);
  request = std::move(one[0]);
  return status;
}

absl::Status Communicator::WaitAll(std::vector<Request>& requests, absl::string_view what) {
  // Every MPI request of every pending transfer, polled together.
  std::vector<MPI_Request> parts;
  std::vector<PartInfo> info;
  std::vector<std::pair<size_t, size_t>> owner;  // (request, part)
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& request = requests[r];
    for (size_t p = 0; p < request.parts_.size(); ++p) {
      parts.push_back(request.parts_[p]);
      info.push_back({request.peer_,
                      request.is_send_ ? int64_t{-1} : int64_t{PieceLength(request.bytes_, p)}});
      owner.emplace_back(r, p);
    }
  }
  if (parts.empty()) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  const PollOutcome outcome = PollParts(parts, info, options_.timeout_s);
  stats_.wait_s += SecondsSince(start);
  // Completed parts are MPI_REQUEST_NULL now; a request stays pending (for
  // another Wait, or cancellation by its destructor) until all its parts are.
  for (size_t i = 0; i < parts.size(); ++i) {
    requests[owner[i].first].parts_[owner[i].second] = parts[i];
  }
  for (Request& request : requests) {
    if (request.parts_.empty() ||
        !std::all_of(request.parts_.begin(), request.parts_.end(),
                     [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
      continue;
    }
    request.parts_.clear();
    if (request.is_send_) {
      stats_.bytes_sent += request.bytes_;
      stats_.messages_sent += 1;
    } else {
      stats_.bytes_received += request.bytes_;
    }
  }
  return Describe(rank_, outcome, info, what, options_.timeout_s);
}

absl::Status Communicator::Poll(std::vector<MPI_Request>& requests, int peer,
                                absl::string_view what) {
  const std::vector<PartInfo> info(requests.size(), PartInfo{peer, -1});
  const Clock::time_point start = Clock::now();
  const PollOutcome outcome = PollParts(requests, info, options_.timeout_s);
  stats_.wait_s += SecondsSince(start);
  return Describe(rank_, outcome, info, what, options_.timeout_s);
}

absl::Status Communicator::Barrier(absl::string_view what) {
  std::vector<MPI_Request> requests(1);
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, what, MpiStatus(MPI_Ibarrier(comm_, &requests[0]), "Ibarrier")));
  return Poll(requests, -1, what);
}

absl::Status Communicator::Broadcast(void* data, int64_t bytes, int root, absl::string_view what) {
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckBytes(bytes, data, "data")));
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckRank(root, size_, "root")));
  char* bytes_ptr = static_cast<char*>(data);
  std::vector<MPI_Request> requests;
  for (int64_t i = 0; i < PieceCount(bytes); ++i) {
    MPI_Request request;
    ATTNKIT_RETURN_IF_ERROR(
        Prefixed(rank_, what,
                 MpiStatus(MPI_Ibcast(bytes_ptr + PieceOffset(i), PieceLength(bytes, i), MPI_BYTE,
                                      root, comm_, &request),
                           "Ibcast")));
    requests.push_back(request);
  }
  ATTNKIT_RETURN_IF_ERROR(Poll(requests, -1, what));
  // Accounting as if the root sent the block to each rank directly.
  if (rank_ == root) {
    stats_.bytes_sent += bytes * (size_ - 1);
    stats_.messages_sent += size_ - 1;
  } else {
    stats_.bytes_received += bytes;
  }
  return absl::OkStatus();
}

namespace {

// A gathering collective posts one call per <= 1 GiB piece of each rank's
// `bytes`: `post(i, length, recv_type, recv_count, &request)` for piece i.
// One piece receives plain bytes; with several, piece i of every rank's
// block lands at i * max + rank * bytes (a strided receive type).
using PostPiece = std::function<int(int64_t i, int length, MPI_Datatype recv_type, int recv_count,
                                    MPI_Request* request)>;

absl::Status PostGatherPieces(int64_t bytes, OwnedTypes& types, const char* call,
                              const PostPiece& post, std::vector<MPI_Request>* requests) {
  const int64_t pieces = PieceCount(bytes);
  for (int64_t i = 0; i < pieces; ++i) {
    const int length = PieceLength(bytes, i);
    MPI_Datatype recv_type = MPI_BYTE;
    int recv_count = length;
    if (pieces > 1) {
      ATTNKIT_ASSIGN_OR_RETURN(recv_type, types.Strided(length, bytes));
      recv_count = 1;
    }
    MPI_Request request;
    ATTNKIT_RETURN_IF_ERROR(MpiStatus(post(i, length, recv_type, recv_count, &request), call));
    requests->push_back(request);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Communicator::Gather(const void* send, void* recv, int64_t bytes, int root,
                                  absl::string_view what) {
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckBytes(bytes, send, "send")));
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckRank(root, size_, "root")));
  if (rank_ == root) {
    ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckBytes(bytes, recv, "recv")));
  }
  const char* send_ptr = static_cast<const char*>(send);
  char* recv_ptr = static_cast<char*>(recv);
  OwnedTypes types;
  std::vector<MPI_Request> requests;
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, what,
               PostGatherPieces(
                   bytes, types, "Igather",
                   [&](int64_t i, int length, MPI_Datatype type, int count, MPI_Request* request) {
                     return MPI_Igather(send_ptr + PieceOffset(i), length, MPI_BYTE,
                                        recv_ptr == nullptr ? nullptr : recv_ptr + PieceOffset(i),
                                        count, type, root, comm_, request);
                   },
                   &requests)));
  ATTNKIT_RETURN_IF_ERROR(Poll(requests, -1, what));
  if (rank_ == root) {
    stats_.bytes_received += bytes * (size_ - 1);
  } else {
    stats_.bytes_sent += bytes;
    stats_.messages_sent += 1;
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllGather(const void* send, void* recv, int64_t bytes,
                                     absl::string_view what) {
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckBytes(bytes, send, "send")));
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, CheckBytes(bytes, recv, "recv")));
  const char* send_ptr = static_cast<const char*>(send);
  char* recv_ptr = static_cast<char*>(recv);
  OwnedTypes types;
  std::vector<MPI_Request> requests;
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, what,
               PostGatherPieces(
                   bytes, types, "Iallgather",
                   [&](int64_t i, int length, MPI_Datatype type, int count, MPI_Request* request) {
                     return MPI_Iallgather(send_ptr + PieceOffset(i), length, MPI_BYTE,
                                           recv_ptr + PieceOffset(i), count, type, comm_, request);
                   },
                   &requests)));
  ATTNKIT_RETURN_IF_ERROR(Poll(requests, -1, what));
  stats_.bytes_sent += bytes * (size_ - 1);
  stats_.bytes_received += bytes * (size_ - 1);
  stats_.messages_sent += size_ - 1;
  return absl::OkStatus();
}

absl::Status Communicator::AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& send_offsets, void* recv,
                                     const std::vector<int64_t>& recv_counts,
                                     const std::vector<int64_t>& recv_offsets,
                                     absl::string_view what) {
  const auto check = [&]() -> absl::Status {
    const std::pair<const char*, const std::vector<int64_t>*> vectors[] = {
        {"send_counts", &send_counts},
        {"send_offsets", &send_offsets},
        {"recv_counts", &recv_counts},
        {"recv_offsets", &recv_offsets}};
    for (const auto& [name, values] : vectors) {
      if (static_cast<int>(values->size()) != size_) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " has ", values->size(), " entries; it must have one per rank (", size_, ")"));
      }
      for (int i = 0; i < size_; ++i) {
        const int64_t value = (*values)[i];
        const bool is_count = absl::EndsWith(name, "counts");
        if (value < 0 || (is_count && value > INT_MAX)) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, "[", i, "] (", value, ") must be in [0, ", is_count ? "2^31)" : "2^63)"));
        }
      }
    }
    for (int i = 0; i < size_; ++i) {
      if (send_counts[i] > 0 && send == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("send is null with send_counts[", i, "] = ", send_counts[i]));
      }
      if (recv_counts[i] > 0 && recv == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("recv is null with recv_counts[", i, "] = ", recv_counts[i]));
      }
    }
    return absl::OkStatus();
  };
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, check()));
  // MPI_Ialltoallw with one block type per peer, whose displacement is an
  // MPI_Aint: offsets beyond 2^31 bytes work (Ialltoallv's are int).
  OwnedTypes types;
  std::vector<int> send_n(size_, 0), recv_n(size_, 0), zero(size_, 0);
  std::vector<MPI_Datatype> send_types(size_, MPI_BYTE), recv_types(size_, MPI_BYTE);
  std::vector<MPI_Request> requests(1);
  const auto post = [&]() -> absl::Status {
    for (int i = 0; i < size_; ++i) {
      if (send_counts[i] > 0) {
        ATTNKIT_ASSIGN_OR_RETURN(send_types[i],
                                 types.Block(static_cast<int>(send_counts[i]), send_offsets[i]));
        send_n[i] = 1;
      }
      if (recv_counts[i] > 0) {
        ATTNKIT_ASSIGN_OR_RETURN(recv_types[i],
                                 types.Block(static_cast<int>(recv_counts[i]), recv_offsets[i]));
        recv_n[i] = 1;
      }
    }
    return MpiStatus(
        MPI_Ialltoallw(send, send_n.data(), zero.data(), send_types.data(), recv, recv_n.data(),
                       zero.data(), recv_types.data(), comm_, &requests[0]),
        "Ialltoallw");
  };
  ATTNKIT_RETURN_IF_ERROR(Prefixed(rank_, what, post()));
  ATTNKIT_RETURN_IF_ERROR(Poll(requests, -1, what));
  for (int i = 0; i < size_; ++i) {
    if (i == rank_) continue;
    stats_.bytes_sent += send_counts[i];
    stats_.bytes_received += recv_counts[i];
    stats_.messages_sent += send_counts[i] > 0 ? 1 : 0;
  }
  return absl::OkStatus();
}

namespace {
// Posts an all-reduce of one double held in `buffer` ([0] in, [1] out).
absl::Status PostAllReduce(double* buffer, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return MpiStatus(MPI_Iallreduce(&buffer[0], &buffer[1], 1, MPI_DOUBLE, op, comm, request),
                   "Iallreduce");
}
}  // namespace

// The reductions' buffers live on the heap and are abandoned on a timeout:
// the pending MPI operation may still write them.
absl::StatusOr<double> Communicator::ReduceOverRanks(double value, MPI_Op op,
                                                     absl::string_view what) {
  auto buffer = std::make_unique<double[]>(2);
  buffer[0] = value;
  std::vector<MPI_Request> requests(1);
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, what, PostAllReduce(buffer.get(), op, comm_, &requests[0])));
  const absl::Status status = Poll(requests, -1, what);
  if (!status.ok()) {
    if (!requests.empty() && requests[0] != MPI_REQUEST_NULL) buffer.release();
    return status;
  }
  stats_.bytes_sent += sizeof(double) * (size_ - 1);
  stats_.bytes_received += sizeof(double) * (size_ - 1);
  return buffer[1];
}

absl::StatusOr<double> Communicator::MaxOverRanks(double value, absl::string_view what) {
  return ReduceOverRanks(value, MPI_MAX, what);
}

absl::StatusOr<double> Communicator::SumOverRanks(double value, absl::string_view what) {
  return ReduceOverRanks(value, MPI_SUM, what);
}

absl::Status Communicator::Agree(const absl::Status& local) {
  static_assert(sizeof(AgreeRecord) == 488, "AgreeRecord is exchanged as raw bytes");
  auto mine = std::make_unique<AgreeRecord>();
  std::memset(mine.get(), 0, sizeof(AgreeRecord));
  mine->code = static_cast<int32_t>(local.code());
  const absl::string_view message = local.message();
  constexpr size_t kRoom = sizeof(AgreeRecord::message);
  if (message.size() <= kRoom) {
    mine->length = static_cast<int32_t>(message.size());
    if (!message.empty()) std::memcpy(mine->message, message.data(), message.size());
  } else {  // cut, marked with "..."
    mine->length = static_cast<int32_t>(kRoom);
    std::memcpy(mine->message, message.data(), kRoom - 3);
    std::memcpy(mine->message + kRoom - 3, "...", 3);
  }
  auto all = std::make_unique<AgreeRecord[]>(size_);
  std::vector<MPI_Request> requests(1);
  constexpr absl::string_view kWhat = "Agree";
  ATTNKIT_RETURN_IF_ERROR(
      Prefixed(rank_, kWhat,
               MpiStatus(MPI_Iallgather(mine.get(), sizeof(AgreeRecord), MPI_BYTE, all.get(),
                                        sizeof(AgreeRecord), MPI_BYTE, comm_, &requests[0]),
                         "Iallgather")));
  absl::Status status = Poll(requests, -1, kWhat);
  if (!status.ok()) {
    if (!requests.empty() && requests[0] != MPI_REQUEST_NULL) {
      mine.release();
      all.release();
    }
    if (local.ok()) return status;
    return absl::Status(
        status.code(),
        absl::StrCat(status.message(), " (this rank's own status: ", local.ToString(), ")"));
  }
  for (int r = 0; r < size_; ++r) {
    const AgreeRecord& record = all[r];
    if (record.code == 0) continue;
    const int32_t code = record.code >= 1 && record.code <= 16
                             ? record.code
                             : static_cast<int32_t>(absl::StatusCode::kUnknown);
    const std::string text(record.message,
                           std::clamp<int32_t>(record.length, 0, static_cast<int32_t>(kRoom)));
    // Statuses this class made already begin "rank R: ".
    const std::string prefix = absl::StrCat("rank ", r, ": ");
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StartsWith(text, prefix) ? text : prefix + text);
  }
  return absl::OkStatus();
}

absl::StatusOr<LinkModel> Communicator::MeasureLink(int64_t bytes, int repeats) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MeasureLink: bytes (", bytes, ") must be >= 1"));
  }
  if (repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MeasureLink: repeats (", repeats, ") must be >= 1"));
  }
  if (size_ < 2) return LinkModel{};
  // [latency_s, bandwidth_bytes_per_s], measured on rank 0.
  double figures[2] = {0.0, 0.0};
  if (rank_ < 2) {
    const int peer = 1 - rank_;
    // Separate buffers: MPI forbids receiving into memory a pending send reads.
    std::vector<char> out(bytes, static_cast<char>(rank_)), in(bytes);
    // The median one-way time of `n`-byte messages: half a round trip, after
    // one unmeasured warm-up round.
    const auto one_way = [&](int64_t n) -> absl::StatusOr<double> {
      std::vector<double> times;
      for (int i = 0; i <= repeats; ++i) {
        const Clock::time_point start = Clock::now();
        if (rank_ == 0) {
          ATTNKIT_ASSIGN_OR_RETURN(Request reply, Irecv(in.data(), n, peer, kLinkTag));
          ATTNKIT_ASSIGN_OR_RETURN(Request ping, Isend(out.data(), n, peer, kLinkTag));
          std::vector<Request> both;
          both.push_back(std::move(ping));
          both.push_back(std::move(reply));
          ATTNKIT_RETURN_IF_ERROR(WaitAll(both, "MeasureLink ping-pong"));
        } else {
          ATTNKIT_ASSIGN_OR_RETURN(Request ping, Irecv(in.data(), n, peer, kLinkTag));
          ATTNKIT_RETURN_IF_ERROR(Wait(ping, "MeasureLink ping-pong"));
          ATTNKIT_ASSIGN_OR_RETURN(Request reply, Isend(out.data(), n, peer, kLinkTag));
          ATTNKIT_RETURN_IF_ERROR(Wait(reply, "MeasureLink ping-pong"));
        }
        if (i > 0) times.push_back(SecondsSince(start) / 2);
      }
      return Median(times);
    };
    ATTNKIT_ASSIGN_OR_RETURN(figures[0], one_way(8));
    ATTNKIT_ASSIGN_OR_RETURN(const double transfer_s, one_way(bytes));
    figures[1] = static_cast<double>(bytes) / transfer_s;
  }
  ATTNKIT_RETURN_IF_ERROR(Broadcast(figures, sizeof(figures), 0, "MeasureLink result"));
  LinkModel link;
  link.latency_s = figures[0];
  link.bandwidth_bytes_per_s = figures[1];
  return link;
}

void Communicator::Abort(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "attnkit dist: rank %d aborts the job (exit code %d): %s\n", rank_,
               exit_code, status.ToString().c_str());
  std::fflush(stderr);
  MPI_Abort(comm_, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler.
}

}  // namespace dist
}  // namespace attnkit

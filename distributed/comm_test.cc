// The Communicator (distributed/comm.h) on 2, 3 and 4 ranks (mpi_test in BUILD):
// point-to-point rings, every collective with its message split and not,
// Agree, argument errors, MPI errors, deadlines and MeasureLink.
#include "distributed/comm.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "distributed/comm_testing.h"
#include "distributed/mpi_test_main.h"

namespace attnkit {
namespace dist {
namespace {

using Clock = std::chrono::steady_clock;

// Byte k of what rank `from` sends rank `to` in message `m`.
uint8_t Pattern(int from, int to, int m, int64_t k) {
  return static_cast<uint8_t>((from * 131 + to * 31 + m * 7 + k * 13 + (k >> 8)) & 0xff);
}

// The first byte where `got` differs from Pattern(from, to, m, .), or -1.
int64_t FirstMismatch(const std::vector<uint8_t>& got, int from, int to, int m) {
  for (int64_t k = 0; k < static_cast<int64_t>(got.size()); ++k) {
    if (got[k] != Pattern(from, to, m, k)) return k;
  }
  return -1;
}

std::vector<uint8_t> Filled(int64_t bytes, int from, int to, int m) {
  std::vector<uint8_t> v(bytes);
  for (int64_t k = 0; k < bytes; ++k) v[k] = Pattern(from, to, m, k);
  return v;
}

// Sets the split size for one check and restores the default after it.
class ScopedMaxMessage {
 public:
  explicit ScopedMaxMessage(int64_t bytes) { testing::SetMaxMessageBytes(bytes); }
  ~ScopedMaxMessage() { testing::SetMaxMessageBytes(testing::kDefaultMaxMessageBytes); }
};

// Every rank sends `sizes[m]` bytes to the next rank and receives as many from
// the previous, all messages posted at once on one tag (MPI keeps the order).
absl::Status Ring(Communicator& comm, const std::vector<int64_t>& sizes) {
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<Communicator::Request> requests;
  for (size_t m = 0; m < sizes.size(); ++m) {
    out.push_back(Filled(sizes[m], comm.rank(), next, m));
    in.emplace_back(sizes[m], 0);
  }
  for (size_t m = 0; m < sizes.size(); ++m) {
    ATTNKIT_ASSIGN_OR_RETURN(auto recv, comm.Irecv(in[m].data(), sizes[m], prev, 5));
    requests.push_back(std::move(recv));
    ATTNKIT_ASSIGN_OR_RETURN(auto send, comm.Isend(out[m].data(), sizes[m], next, 5));
    requests.push_back(std::move(send));
  }
  ATTNKIT_RETURN_IF_ERROR(comm.WaitAll(requests, "ring"));
  for (const auto& r : requests) ATTNKIT_MPI_EXPECT(!r.pending(), "a request still pending");
  for (size_t m = 0; m < sizes.size(); ++m) {
    const int64_t bad = FirstMismatch(in[m], prev, comm.rank(), m);
    ATTNKIT_MPI_EXPECT(bad < 0, "message ", m, " (", sizes[m], " bytes) from rank ", prev,
                       " differs at byte ", bad);
  }
  return absl::OkStatus();
}

absl::Status RingExchange(Communicator& comm) {
  const std::vector<int64_t> sizes = {0, 1, 1000, 3 << 20};
  ATTNKIT_RETURN_IF_ERROR(Ring(comm, sizes));
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const CommStats& s = comm.stats();
  ATTNKIT_MPI_EXPECT(s.bytes_sent == total, "bytes_sent ", s.bytes_sent, " != ", total);
  ATTNKIT_MPI_EXPECT(s.bytes_received == total, "bytes_received ", s.bytes_received);
  ATTNKIT_MPI_EXPECT(s.messages_sent == 4, "messages_sent ", s.messages_sent);
  ATTNKIT_MPI_EXPECT(s.wait_s >= 0, "wait_s ", s.wait_s);
  return absl::OkStatus();
}

// Messages above the split size travel in pieces; sizes around its multiples.
absl::Status SplitMessages(Communicator& comm) {
  ScopedMaxMessage split(4096);
  return Ring(comm, {4095, 4096, 4097, 10000, 8192, 1, 3 * 4096 + 5});
}

absl::Status Broadcast(Communicator& comm) {
  for (int64_t max : {testing::kDefaultMaxMessageBytes, int64_t{1000}}) {
    ScopedMaxMessage split(max);
    for (int root : {0, comm.size() - 1}) {
      std::vector<uint8_t> data =
          comm.rank() == root ? Filled(5000, root, 0, 1) : std::vector<uint8_t>(5000, 0);
      ATTNKIT_RETURN_IF_ERROR(comm.Broadcast(data.data(), 5000, root, "broadcast"));
      const int64_t bad = FirstMismatch(data, root, 0, 1);
      ATTNKIT_MPI_EXPECT(bad < 0, "root ", root, ", split ", max, ": byte ", bad, " differs");
    }
  }
  return absl::OkStatus();
}

// Gather and AllGather of 777-byte blocks, whole and split into 100-byte pieces.
absl::Status Gathers(Communicator& comm) {
  constexpr int64_t kBytes = 777;
  const int n = comm.size();
  for (int64_t max : {testing::kDefaultMaxMessageBytes, int64_t{100}}) {
    ScopedMaxMessage split(max);
    const std::vector<uint8_t> mine = Filled(kBytes, comm.rank(), 0, 2);
    for (int root : {0, n - 1}) {
      std::vector<uint8_t> all(comm.rank() == root ? n * kBytes : 0, 0);
      ATTNKIT_RETURN_IF_ERROR(
          comm.Gather(mine.data(), all.empty() ? nullptr : all.data(), kBytes, root, "gather"));
      if (comm.rank() != root) continue;
      for (int r = 0; r < n; ++r) {
        const std::vector<uint8_t> block(all.begin() + r * kBytes, all.begin() + (r + 1) * kBytes);
        const int64_t bad = FirstMismatch(block, r, 0, 2);
        ATTNKIT_MPI_EXPECT(bad < 0, "gather to ", root, ", split ", max, ": rank ", r,
                           "'s block differs at byte ", bad);
      }
    }
    std::vector<uint8_t> all(n * kBytes, 0);
    ATTNKIT_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), kBytes, "allgather"));
    for (int r = 0; r < n; ++r) {
      const std::vector<uint8_t> block(all.begin() + r * kBytes, all.begin() + (r + 1) * kBytes);
      const int64_t bad = FirstMismatch(block, r, 0, 2);
      ATTNKIT_MPI_EXPECT(bad < 0, "allgather, split ", max, ": rank ", r,
                         "'s block differs at byte ", bad);
    }
  }
  const CommStats& s = comm.stats();
  ATTNKIT_MPI_EXPECT(s.bytes_received > 0 && s.bytes_sent > 0, "no traffic counted: sent ",
                     s.bytes_sent, ", received ", s.bytes_received);
  return absl::OkStatus();
}

// Bytes rank `from` sends rank `to` (some pairs send nothing).
int64_t PairCount(int from, int to) { return ((from + 2 * to) % 4) * 37; }

// AllToAllV with uneven counts (zeros included) at offsets with 5-byte gaps,
// which must stay untouched.
absl::Status AllToAllV(Communicator& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  constexpr int64_t kGap = 5;
  constexpr uint8_t kUntouched = 0xEE;
  std::vector<int64_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
  int64_t send_total = 0, recv_total = 0;
  // Blocks in reverse rank order, so offsets do not follow the ranks.
  for (int j = n - 1; j >= 0; --j) {
    send_counts[j] = PairCount(me, j);
    send_offsets[j] = send_total + kGap;
    send_total += send_counts[j] + kGap;
    recv_counts[j] = PairCount(j, me);
    recv_offsets[j] = recv_total + kGap;
    recv_total += recv_counts[j] + kGap;
  }
  std::vector<uint8_t> send(send_total, 0), recv(recv_total, kUntouched);
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < send_counts[j]; ++k) send[send_offsets[j] + k] = Pattern(me, j, 3, k);
  }
  ATTNKIT_RETURN_IF_ERROR(comm.AllToAllV(send.data(), send_counts, send_offsets, recv.data(),
                                         recv_counts, recv_offsets, "alltoallv"));
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < recv_counts[j]; ++k) {
      ATTNKIT_MPI_EXPECT(recv[recv_offsets[j] + k] == Pattern(j, me, 3, k), "byte ", k,
                         " from rank ", j, " differs");
    }
    for (int64_t k = 1; k <= kGap; ++k) {
      ATTNKIT_MPI_EXPECT(recv[recv_offsets[j] - k] == kUntouched, "gap byte before rank ", j,
                         "'s block was written");
    }
  }
  int64_t sent = 0;
  for (int j = 0; j < n; ++j) sent += j == me ? 0 : send_counts[j];
  ATTNKIT_MPI_EXPECT(comm.stats().bytes_sent == sent, "bytes_sent ", comm.stats().bytes_sent,
                     " != ", sent);
  // Argument errors name the field.
  std::vector<int64_t> short_counts(n - 1, 0);
  const absl::Status bad = comm.AllToAllV(send.data(), short_counts, send_offsets, recv.data(),
                                          recv_counts, recv_offsets, "alltoallv");
  ATTNKIT_MPI_EXPECT(bad.code() == absl::StatusCode::kInvalidArgument &&
                         absl::StrContains(bad.message(), "send_counts has"),
                     bad.ToString());
  return absl::OkStatus();
}

absl::Status Reductions(Communicator& comm) {
  const int n = comm.size();
  ATTNKIT_ASSIGN_OR_RETURN(const double max, comm.MaxOverRanks(comm.rank(), "max"));
  ATTNKIT_MPI_EXPECT(max == n - 1, "max ", max);
  ATTNKIT_ASSIGN_OR_RETURN(const double neg, comm.MaxOverRanks(-1.5 - comm.rank(), "max"));
  ATTNKIT_MPI_EXPECT(neg == -1.5, "max of negatives ", neg);
  ATTNKIT_ASSIGN_OR_RETURN(const double sum, comm.SumOverRanks(comm.rank() + 1, "sum"));
  ATTNKIT_MPI_EXPECT(sum == n * (n + 1) / 2, "sum ", sum);
  ATTNKIT_RETURN_IF_ERROR(comm.Barrier("barrier"));
  return absl::OkStatus();
}

absl::Status AgreeCheck(Communicator& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  absl::Status all_ok = comm.Agree(absl::OkStatus());
  ATTNKIT_MPI_EXPECT(all_ok.ok(), all_ok.ToString());
  // One rank fails: everyone sees its status, prefixed with its rank.
  const absl::Status last =
      comm.Agree(me == n - 1 ? absl::InvalidArgumentError("bad input") : absl::OkStatus());
  ATTNKIT_MPI_EXPECT(last.code() == absl::StatusCode::kInvalidArgument &&
                         last.message() == absl::StrCat("rank ", n - 1, ": bad input"),
                     last.ToString());
  // Several fail: the lowest rank wins; a message already naming its rank is
  // not prefixed twice.
  absl::Status local = absl::OkStatus();
  if (me == 1) local = absl::DeadlineExceededError("rank 1: step 3: no progress");
  if (me == n - 1 && n > 2) local = absl::InternalError("later failure");
  const absl::Status lowest = comm.Agree(local);
  ATTNKIT_MPI_EXPECT(lowest.code() == absl::StatusCode::kDeadlineExceeded &&
                         lowest.message() == "rank 1: step 3: no progress",
                     lowest.ToString());
  // Long messages are cut at 480 bytes, marked "...".
  const absl::Status long_one =
      comm.Agree(me == 0 ? absl::NotFoundError(std::string(1000, 'x')) : absl::OkStatus());
  ATTNKIT_MPI_EXPECT(
      long_one.code() == absl::StatusCode::kNotFound &&
          long_one.message() == absl::StrCat("rank 0: ", std::string(477, 'x'), "..."),
      "got ", long_one.message().size(), " bytes: ", long_one.ToString());
  return absl::OkStatus();
}

absl::Status InvalidArguments(Communicator& comm) {
  const int n = comm.size();
  char byte = 0;
  const auto expect_invalid = [](const absl::Status& s, absl::string_view text) {
    return s.code() == absl::StatusCode::kInvalidArgument && absl::StrContains(s.message(), text);
  };
  const absl::Status dest = comm.Isend(&byte, 1, n, 0).status();
  ATTNKIT_MPI_EXPECT(expect_invalid(dest, absl::StrCat("rank ", comm.rank(), ": Isend: dest (", n,
                                                       ") must be a rank in [0, ", n, ")")),
                     dest.ToString());
  const absl::Status bytes = comm.Irecv(&byte, -1, 0, 0).status();
  ATTNKIT_MPI_EXPECT(expect_invalid(bytes, "bytes (-1) must be >= 0"), bytes.ToString());
  const absl::Status null = comm.Isend(nullptr, 4, 0, 0).status();
  ATTNKIT_MPI_EXPECT(expect_invalid(null, "data is null with bytes = 4"), null.ToString());
  const absl::Status tag = comm.Irecv(&byte, 1, 0, -1).status();
  ATTNKIT_MPI_EXPECT(expect_invalid(tag, "tag (-1) must be in [0, MPI_TAG_UB"), tag.ToString());
  const absl::Status root = comm.Broadcast(&byte, 1, -1, "bcast");
  ATTNKIT_MPI_EXPECT(expect_invalid(root, "bcast: root (-1) must be a rank"), root.ToString());
  for (double timeout : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    const absl::Status wrap = Communicator::Wrap(comm.comm(), {timeout}).status();
    ATTNKIT_MPI_EXPECT(expect_invalid(wrap, "CommOptions.timeout_s"), wrap.ToString());
  }
  const absl::Status link = comm.MeasureLink(0).status();
  ATTNKIT_MPI_EXPECT(expect_invalid(link, "MeasureLink: bytes (0) must be >= 1"), link.ToString());
  return absl::OkStatus();
}

// Rank 1 sends late: rank 0's Wait (1 s deadline) ends in DeadlineExceeded
// naming rank 1, the request stays pending, and a second Wait completes it.
absl::Status ReceiveTimeout(Communicator& comm) {
  ATTNKIT_ASSIGN_OR_RETURN(Communicator quick, Communicator::Wrap(comm.comm(), {1.0}));
  std::vector<uint8_t> data(64, 0);
  Communicator::Request late;
  if (comm.rank() == 0) {
    ATTNKIT_ASSIGN_OR_RETURN(late, quick.Irecv(data.data(), 64, 1, 11));
    const Clock::time_point start = Clock::now();
    const absl::Status s = quick.Wait(late, "reply");
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    ATTNKIT_MPI_EXPECT(s.code() == absl::StatusCode::kDeadlineExceeded &&
                           s.message() == "rank 0: reply: no progress from rank 1 within 1 s",
                       s.ToString());
    ATTNKIT_MPI_EXPECT(took >= 0.99 && took < 3.0, "the timeout took ", took, " s");
    ATTNKIT_MPI_EXPECT(late.pending(), "the timed-out request is no longer pending");
    ATTNKIT_MPI_EXPECT(quick.stats().wait_s >= 0.99, "wait_s ", quick.stats().wait_s);
  }
  ATTNKIT_RETURN_IF_ERROR(comm.Barrier("after the timeout"));
  if (comm.rank() == 1) {
    const std::vector<uint8_t> out = Filled(64, 1, 0, 4);
    ATTNKIT_ASSIGN_OR_RETURN(auto send, comm.Isend(out.data(), 64, 0, 11));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(send, "late send"));
  }
  if (comm.rank() == 0) {
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(late, "late reply"));
    ATTNKIT_MPI_EXPECT(FirstMismatch(data, 1, 0, 4) < 0, "the late message differs");
  }
  return absl::OkStatus();
}

// A 1 MiB send (rendezvous: it needs the receiver) times out on rank 1
// naming rank 0; once rank 0 receives, the same request completes.
absl::Status SendTimeout(Communicator& comm) {
  constexpr int64_t kBytes = 1 << 20;
  ATTNKIT_ASSIGN_OR_RETURN(Communicator quick, Communicator::Wrap(comm.comm(), {1.0}));
  const std::vector<uint8_t> out = Filled(kBytes, 1, 0, 5);
  Communicator::Request send;
  if (comm.rank() == 1) {
    ATTNKIT_ASSIGN_OR_RETURN(send, quick.Isend(out.data(), kBytes, 0, 12));
    const absl::Status s = quick.Wait(send, "K/V block of step 3");
    ATTNKIT_MPI_EXPECT(
        s.code() == absl::StatusCode::kDeadlineExceeded &&
            s.message() == "rank 1: K/V block of step 3: no progress from rank 0 within 1 s",
        s.ToString());
  }
  ATTNKIT_RETURN_IF_ERROR(comm.Barrier("after the timeout"));
  if (comm.rank() == 0) {
    std::vector<uint8_t> in(kBytes, 0);
    ATTNKIT_ASSIGN_OR_RETURN(auto recv, comm.Irecv(in.data(), kBytes, 1, 12));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(recv, "late receive"));
    ATTNKIT_MPI_EXPECT(FirstMismatch(in, 1, 0, 5) < 0, "the late message differs");
  }
  if (comm.rank() == 1) ATTNKIT_RETURN_IF_ERROR(comm.Wait(send, "late send"));
  return absl::OkStatus();
}

// Destroying a pending receive cancels it: the message sent afterwards on the
// same tag reaches the next receive, not the abandoned one.
absl::Status DestroyPending(Communicator& comm) {
  int value = 0;
  if (comm.rank() == 0) {
    ATTNKIT_ASSIGN_OR_RETURN(auto abandoned, comm.Irecv(&value, sizeof(value), 1, 13));
    // Destroyed here, pending (prints a warning).
  }
  ATTNKIT_RETURN_IF_ERROR(comm.Barrier("after the abandoned receive"));
  if (comm.rank() == 1) {
    const int answer = 42;
    ATTNKIT_ASSIGN_OR_RETURN(auto send, comm.Isend(&answer, sizeof(answer), 0, 13));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(send, "answer"));
  }
  if (comm.rank() == 0) {
    ATTNKIT_ASSIGN_OR_RETURN(auto recv, comm.Irecv(&value, sizeof(value), 1, 13));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(recv, "answer"));
    ATTNKIT_MPI_EXPECT(value == 42, "received ", value);
  }
  return absl::OkStatus();
}

// A longer message than posted is MPI's MPI_ERR_TRUNCATE; a shorter one is
// caught by the byte count. Both are Internal and name the rank and transfer.
absl::Status MpiErrors(Communicator& comm) {
  std::vector<uint8_t> buffer(100, 7);
  if (comm.rank() == 1) {
    ATTNKIT_ASSIGN_OR_RETURN(auto longer, comm.Isend(buffer.data(), 100, 0, 14));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(longer, "longer"));
    ATTNKIT_ASSIGN_OR_RETURN(auto shorter, comm.Isend(buffer.data(), 50, 0, 15));
    ATTNKIT_RETURN_IF_ERROR(comm.Wait(shorter, "shorter"));
  }
  if (comm.rank() == 0) {
    ATTNKIT_ASSIGN_OR_RETURN(auto truncated, comm.Irecv(buffer.data(), 50, 1, 14));
    const absl::Status t = comm.Wait(truncated, "block 2");
    ATTNKIT_MPI_EXPECT(t.code() == absl::StatusCode::kInternal &&
                           absl::StartsWith(t.message(), "rank 0: block 2: ") &&
                           absl::StrContains(t.message(), "MPI_ERR_TRUNCATE"),
                       t.ToString());
    ATTNKIT_ASSIGN_OR_RETURN(auto short_recv, comm.Irecv(buffer.data(), 100, 1, 15));
    const absl::Status s = comm.Wait(short_recv, "block 3");
    ATTNKIT_MPI_EXPECT(s.code() == absl::StatusCode::kInternal &&
                           s.message() ==
                               "rank 0: block 3: received 50 bytes from rank 1, expected 100 "
                               "(the sender's message is shorter)",
                       s.ToString());
  }
  return absl::OkStatus();
}

absl::Status MeasureLink(Communicator& comm) {
  ATTNKIT_ASSIGN_OR_RETURN(const LinkModel link, comm.MeasureLink(int64_t{1} << 20, 4));
  ATTNKIT_MPI_EXPECT(link.latency_s > 0 && link.latency_s < 0.1, "latency ", link.latency_s);
  ATTNKIT_MPI_EXPECT(link.bandwidth_bytes_per_s > 1e6, "bandwidth ", link.bandwidth_bytes_per_s);
  // Every rank has rank 0's figures.
  ATTNKIT_ASSIGN_OR_RETURN(const double max_latency, comm.MaxOverRanks(link.latency_s, "max"));
  ATTNKIT_ASSIGN_OR_RETURN(const double max_bw,
                           comm.MaxOverRanks(link.bandwidth_bytes_per_s, "max"));
  ATTNKIT_MPI_EXPECT(max_latency == link.latency_s && max_bw == link.bandwidth_bytes_per_s,
                     "ranks disagree on the link figures");
  if (comm.rank() == 0) {
    std::printf("MeasureLink on %d ranks: latency %.2f us, bandwidth %.2f GB/s\n", comm.size(),
                link.latency_s * 1e6, link.bandwidth_bytes_per_s / 1e9);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dist
}  // namespace attnkit

int main(int argc, char** argv) {
  using namespace attnkit::dist;  // NOLINT: the check list reads better.
  return RunMpiChecks(argc, argv,
                      {
                          {"ring_exchange", RingExchange},
                          {"split_messages", SplitMessages},
                          {"broadcast", Broadcast},
                          {"gathers", Gathers},
                          {"alltoallv", AllToAllV},
                          {"reductions", Reductions},
                          {"agree", AgreeCheck},
                          {"invalid_arguments", InvalidArguments},
                          {"receive_timeout", ReceiveTimeout},
                          {"send_timeout", SendTimeout},
                          {"destroy_pending", DestroyPending},
                          {"mpi_errors", MpiErrors},
                          {"measure_link", MeasureLink},
                      });
}

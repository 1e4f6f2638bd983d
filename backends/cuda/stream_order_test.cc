// ScratchOrder's decisions, and an emulation of CUDA streams on the CPU that
// runs a backend's calls (each writes the shared scratch, then reads it, as
// a split-K decode writes partials that the combine kernel reads) on streams
// switched by SetStream, with the queued work run in random interleavings:
// with ScratchOrder no call ever reads another call's scratch; without an
// order (the backends before issue 33), or with a record that a later use
// leaves stale, some interleaving does.
#include "backends/cuda/stream_order.h"

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace cuda {
namespace {

StreamHandle S(int i) { return reinterpret_cast<StreamHandle>(static_cast<intptr_t>(0x100 + i)); }

TEST(ScratchOrderTest, OneStreamNeverWaits) {
  ScratchOrder order;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(order.WaitBeforeUse(S(0)));
  EXPECT_FALSE(order.RecordOnSwitch(S(0), S(0)));
}

TEST(ScratchOrderTest, SwitchAfterUseRecordsAndTheNextStreamWaitsOnce) {
  ScratchOrder order;
  EXPECT_FALSE(order.WaitBeforeUse(S(0)));
  ASSERT_TRUE(order.RecordOnSwitch(S(0), S(1)));
  order.Recorded();
  EXPECT_TRUE(order.WaitBeforeUse(S(1)));
  EXPECT_FALSE(order.WaitBeforeUse(S(1)));
  ASSERT_TRUE(order.RecordOnSwitch(S(1), S(0)));
  order.Recorded();
  EXPECT_TRUE(order.WaitBeforeUse(S(0)));
}

TEST(ScratchOrderTest, SwitchWithoutUseRecordsNothing) {
  ScratchOrder order;
  EXPECT_FALSE(order.RecordOnSwitch(S(0), S(1)));  // nothing used yet
  EXPECT_FALSE(order.WaitBeforeUse(S(1)));
  ASSERT_TRUE(order.RecordOnSwitch(S(1), S(2)));
  order.Recorded();
  // S(2) never used the scratch: leaving it records nothing, and S(3) waits
  // for the record S(1) made.
  EXPECT_FALSE(order.RecordOnSwitch(S(2), S(3)));
  EXPECT_TRUE(order.WaitBeforeUse(S(3)));
}

TEST(ScratchOrderTest, AUseAfterTheRecordMakesItStale) {
  ScratchOrder order;
  order.WaitBeforeUse(S(0));
  ASSERT_TRUE(order.RecordOnSwitch(S(0), S(1)));
  order.Recorded();
  EXPECT_FALSE(order.RecordOnSwitch(S(1), S(0)));  // S(1) did not use it
  EXPECT_FALSE(order.WaitBeforeUse(S(0)));         // still the last user
  // S(0) used the scratch after the record: leaving it must record again.
  EXPECT_TRUE(order.RecordOnSwitch(S(0), S(2)));
}

TEST(ScratchOrderTest, AFailedRecordIsNotTakenForOne) {
  ScratchOrder order;
  order.WaitBeforeUse(S(0));
  ASSERT_TRUE(order.RecordOnSwitch(S(0), S(1)));
  // cudaEventRecord failed: Recorded() was not called, so it is asked again.
  EXPECT_TRUE(order.RecordOnSwitch(S(0), S(1)));
}

TEST(ScratchOrderTest, FinishedWorkNeedsNoWait) {
  ScratchOrder order;
  order.WaitBeforeUse(S(0));
  order.Finished(S(1), order.uses());  // not the last user: changes nothing
  EXPECT_TRUE(order.RecordOnSwitch(S(0), S(1)));
  order.Finished(S(0), order.uses());
  EXPECT_FALSE(order.RecordOnSwitch(S(0), S(1)));
  EXPECT_FALSE(order.WaitBeforeUse(S(1)));
}

// Synchronize on one thread while another queues a call: the sync waited
// only for the uses before it, so the new one still counts.
TEST(ScratchOrderTest, AUseDuringSynchronizeStillCounts) {
  ScratchOrder order;
  order.WaitBeforeUse(S(0));
  const long long before = order.uses();  // Synchronize starts waiting
  order.WaitBeforeUse(S(0));              // another thread queues a call
  order.Finished(S(0), before);           // the wait returns
  EXPECT_TRUE(order.RecordOnSwitch(S(0), S(1)));
}

// The backends before issue 33: no order at all.
struct NoOrder {
  bool RecordOnSwitch(StreamHandle, StreamHandle) const { return false; }
  void Recorded() {}
  bool WaitBeforeUse(StreamHandle) { return false; }
  long long uses() const { return 0; }
  void Finished(StreamHandle, long long) {}
};

// A planted bug: a use after the record does not make the record stale.
struct StaleRecord {
  bool RecordOnSwitch(StreamHandle from, StreamHandle to) const {
    return from != to && used && last == from && !recorded;
  }
  void Recorded() { recorded = true; }
  bool WaitBeforeUse(StreamHandle s) {
    const bool wait = used && last != s;
    if (last != s) recorded = false;
    used = true;
    last = s;
    return wait;
  }
  long long uses() const { return 0; }
  void Finished(StreamHandle s, long long) {
    if (last == s) used = recorded = false;
  }
  bool used = false, recorded = false;
  StreamHandle last = nullptr;
};

// CUDA's semantics for one event: a record captures the work queued on its
// stream before it; a wait (cudaStreamWaitEvent) holds its stream until the
// record that was the latest when the wait was queued has run (a wait on a
// never-recorded event does nothing).
struct Op {
  enum Kind { kRecord, kWait, kWrite, kRead } kind;
  int value;  // record: its number; wait: the record it waits for; write/read: the call
};

template <class Order>
class Emulation {
 public:
  Emulation(int streams, uint32_t seed) : queues_(streams), rng_(seed) {}

  // Backend::SetStream, as CudaBackendBase does it.
  void SetStream(int to) {
    if (order_.RecordOnSwitch(S(current_), S(to))) {
      queues_[current_].push_back({Op::kRecord, ++records_});
      record_done_.push_back(false);
      order_.Recorded();
    }
    current_ = to;
  }
  // A forward with split-K: its kernels write the scratch, then read it back.
  void Forward() {
    if (order_.WaitBeforeUse(S(current_))) queues_[current_].push_back({Op::kWait, records_});
    ++calls_;
    queues_[current_].push_back({Op::kWrite, calls_});
    queues_[current_].push_back({Op::kRead, calls_});
  }
  // Backend::Synchronize on the current stream.
  void Synchronize() {
    while (!queues_[current_].empty()) Step(/*prefer=*/current_);
    order_.Finished(S(current_), order_.uses());
  }
  // The device runs up to n queued operations, any runnable stream first.
  void Run(int n) {
    for (int i = 0; i < n && Step(-1); ++i) {
    }
  }
  void Drain() {
    while (Step(-1)) {
    }
  }
  int corrupted() const { return corrupted_; }

 private:
  bool Runnable(int s) const {
    if (queues_[s].empty()) return false;
    const Op& op = queues_[s].front();
    return op.kind != Op::kWait || op.value == 0 || record_done_[op.value];
  }
  // Runs the head of `prefer` when it can run, else of a random runnable
  // stream; false when nothing can run.
  bool Step(int prefer) {
    std::vector<int> runnable;
    for (int s = 0; s < static_cast<int>(queues_.size()); ++s) {
      if (Runnable(s)) runnable.push_back(s);
    }
    if (runnable.empty()) return false;
    int s = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng_)];
    if (prefer >= 0 && Runnable(prefer) && rng_() % 2 == 0) s = prefer;
    const Op op = queues_[s].front();
    queues_[s].pop_front();
    switch (op.kind) {
      case Op::kRecord:
        record_done_[op.value] = true;
        break;
      case Op::kWait:
        break;
      case Op::kWrite:
        scratch_ = op.value;
        break;
      case Op::kRead:
        if (scratch_ != op.value) ++corrupted_;
        break;
    }
    return true;
  }

  Order order_;
  std::vector<std::deque<Op>> queues_;
  std::mt19937 rng_;
  std::vector<bool> record_done_ = {true};  // by record number; 0: never recorded
  int current_ = 0, records_ = 0, calls_ = 0, scratch_ = 0, corrupted_ = 0;
};

// Random scenarios: calls on up to three streams switched at random, with
// the device running some of the queued work between host actions.
template <class Order>
int CorruptedScenarios(int scenarios) {
  int bad = 0;
  for (int seed = 1; seed <= scenarios; ++seed) {
    std::mt19937 host(seed);
    Emulation<Order> emu(3, seed * 7919u);
    for (int action = 0; action < 16; ++action) {
      switch (host() % 6) {
        case 0:
        case 1:
          emu.SetStream(static_cast<int>(host() % 3));
          break;
        case 5:
          if (host() % 4 == 0) {
            emu.Synchronize();
            break;
          }
          [[fallthrough]];
        default:
          emu.Forward();
      }
      emu.Run(static_cast<int>(host() % 4));
    }
    emu.Drain();
    bad += emu.corrupted() > 0;
  }
  return bad;
}

TEST(ScratchOrderEmulationTest, NoCallReadsAnotherCallsScratch) {
  EXPECT_EQ(CorruptedScenarios<ScratchOrder>(3000), 0);
}

// The emulation can fail: without an order (the old behaviour), and with a
// stale record, calls on alternating streams read each other's scratch.
TEST(ScratchOrderEmulationTest, DetectsTheOldBehaviourAndAStaleRecord) {
  EXPECT_GT(CorruptedScenarios<NoOrder>(3000), 100);
  EXPECT_GT(CorruptedScenarios<StaleRecord>(3000), 0);
}

// The case the bundle runs on a GPU (cuda_plugin_test
// TwoStreamsDoNotShareScratchInFlight): calls alternating between two
// streams with no synchronisation between them, the device interleaving
// their kernels in the worst order it can.
TEST(ScratchOrderEmulationTest, AlternatingStreamsWithoutSynchronisation) {
  int broken = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    Emulation<ScratchOrder> ordered(2, seed);
    Emulation<NoOrder> unordered(2, seed);
    for (int call = 0; call < 8; ++call) {
      ordered.SetStream(call % 2);
      ordered.Forward();
      unordered.SetStream(call % 2);
      unordered.Forward();
    }
    ordered.Drain();
    unordered.Drain();
    EXPECT_EQ(ordered.corrupted(), 0) << "seed " << seed;
    broken += unordered.corrupted() > 0;
  }
  EXPECT_GT(broken, 0) << "no interleaving broke the unordered backend";
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit

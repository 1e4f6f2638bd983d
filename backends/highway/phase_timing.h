// Where the forward's time goes, phase by phase, in a benchmark build: the
// tile loop of sdpa-inl.h marks the end of each phase with
// ATTNKIT_PHASE_MARK, which counts time-stamp-counter ticks only where
// ATTNKIT_PHASE_TIMING is defined (the :sdpa_phase_timed library that
// //benchmarks:phase_bench links); everywhere else the marks compile to
// nothing. The ticks of a work item are added to process-wide totals once,
// when it ends.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_PHASE_TIMING_H_
#define ATTNKIT_BACKENDS_HIGHWAY_PHASE_TIMING_H_

#include <array>
#include <cstdint>

namespace attnkit {
namespace phase_timing {

enum Phase : int {
  kQuery,       // Q rows loaded (scaled, converted, transposed or paired)
  kKvLoad,      // K/V tile converted to f32 (or V pairs packed), prefetches
  kQK,          // scores: Q.K
  kMask,        // scales, masks, NaN flags, soft-cap, bias
  kSoftmax,     // the online softmax update (max, exp, sums)
  kPV,          // O = alpha O + P.V (P packed to bf16 under FAST)
  kFinish,      // rows normalised and stored, split-K partials written
  kDecodeTile,  // a packed (decode) tile whole: its phases are one call
  kPhases
};
const char* PhaseName(int phase);

struct Totals {
  std::array<uint64_t, kPhases> ticks{};
  uint64_t items = 0;
};
// Adds one item's ticks to the totals (thread-safe).
void Add(const std::array<uint64_t, kPhases>& ticks);
// The totals since the last call, which resets them.
Totals Take();
// Time-stamp counter ticks per second (measured once, against steady_clock).
double TicksPerSecond();
// The time-stamp counter (x86) or steady_clock nanoseconds.
uint64_t Now();

// Ticks of one work item: Mark(p) charges the time since the previous mark
// (or construction) to p; the destructor adds them to the totals.
class ItemTimer {
 public:
  ItemTimer() : last_(Now()) {}
  ~ItemTimer() { Add(ticks_); }
  ItemTimer(const ItemTimer&) = delete;
  ItemTimer& operator=(const ItemTimer&) = delete;
  void Mark(Phase p) {
    const uint64_t now = Now();
    ticks_[p] += now - last_;
    last_ = now;
  }

 private:
  std::array<uint64_t, kPhases> ticks_{};
  uint64_t last_;
};

}  // namespace phase_timing
}  // namespace attnkit

#ifdef ATTNKIT_PHASE_TIMING
#define ATTNKIT_PHASE_TIMER(name) ::attnkit::phase_timing::ItemTimer name
#define ATTNKIT_PHASE_MARK(name, phase) name.Mark(::attnkit::phase_timing::phase)
#else
#define ATTNKIT_PHASE_TIMER(name) static_cast<void>(0)
#define ATTNKIT_PHASE_MARK(name, phase) static_cast<void>(0)
#endif

#endif  // ATTNKIT_BACKENDS_HIGHWAY_PHASE_TIMING_H_

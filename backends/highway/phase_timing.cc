#include "backends/highway/phase_timing.h"

#include <atomic>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace attnkit {
namespace phase_timing {
namespace {

std::array<std::atomic<uint64_t>, kPhases> g_ticks{};
std::atomic<uint64_t> g_items{0};

}  // namespace

const char* PhaseName(int phase) {
  static constexpr const char* kNames[kPhases] = {"query",   "kv load", "q.k",    "mask",
                                                  "softmax", "p.v",     "finish", "decode tile"};
  return phase >= 0 && phase < kPhases ? kNames[phase] : "?";
}

uint64_t Now() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

double TicksPerSecond() {
  static const double rate = [] {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t t0 = Now();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(50)) {
    }
    const uint64_t t1 = Now();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(t1 - t0) / s;
  }();
  return rate;
}

void Add(const std::array<uint64_t, kPhases>& ticks) {
  for (int i = 0; i < kPhases; ++i) g_ticks[i].fetch_add(ticks[i], std::memory_order_relaxed);
  g_items.fetch_add(1, std::memory_order_relaxed);
}

Totals Take() {
  Totals t;
  for (int i = 0; i < kPhases; ++i) t.ticks[i] = g_ticks[i].exchange(0);
  t.items = g_items.exchange(0);
  return t;
}

}  // namespace phase_timing
}  // namespace attnkit

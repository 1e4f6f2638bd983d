#include "platform/amx.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace attnkit {

bool CpuHasAmxBF16() {
  // Leaf 7, subleaf 0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (GCC 12's
  // __builtin_cpu_supports does not know them).
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0;
}

bool AmxTilesGranted() {
  static const bool granted = [] {
    if (!CpuHasAmxBF16()) return false;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

}  // namespace attnkit

#else

namespace attnkit {

bool CpuHasAmxBF16() { return false; }
bool AmxTilesGranted() { return false; }

}  // namespace attnkit

#endif

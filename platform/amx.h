// AMX's tile state on Linux. The kernel hands a process the 8 KiB a thread
// of tile data only on request (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16
// and later); until then the first tile instruction faults with SIGILL.
// Every library in the process that runs tile instructions needs it: the
// highway backend's AMX kernels, and oneDNN 2.6, which dispatches to AMX
// where CPUID shows it but does not ask.
#ifndef ATTNKIT_PLATFORM_AMX_H_
#define ATTNKIT_PLATFORM_AMX_H_

namespace attnkit {

// CPUID says the CPU has AMX-TILE and AMX-BF16.
bool CpuHasAmxBF16();

// CpuHasAmxBF16(), and Linux granted this process the tile state (asked
// once, on the first call; thread-safe). The grant holds for every thread.
bool AmxTilesGranted();

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_AMX_H_

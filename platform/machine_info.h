// Facts about this machine used to key cached measurements.
#ifndef ATTNKIT_PLATFORM_MACHINE_INFO_H_
#define ATTNKIT_PLATFORM_MACHINE_INFO_H_

#include <cstdint>
#include <string>

namespace attnkit {

// The first value of `key` in /proc/cpuinfo ("model name", "flags", ...), or
// "" when absent (e.g. not Linux).
std::string CpuInfoField(const std::string& key);
// Online logical CPUs (at least 1), read once: hardware_concurrency() reads
// /sys on every call. ThreadsOrEveryCore(0) is this; n > 0 is n.
int CoreCount();
inline int ThreadsOrEveryCore(int threads) { return threads > 0 ? threads : CoreCount(); }

// Bytes of the largest (last-level) data or unified cache the OS reports for
// CPU 0 (/sys/devices/system/cpu/cpu0/cache), 0 when it reports none.
int64_t LastLevelCacheBytes();
// "model name" from /proc/cpuinfo, or "unknown-cpu".
std::string CpuModel();

// Where measurements are cached: $ATTNKIT_CACHE_DIR, else
// $XDG_CACHE_HOME/attnkit, else $HOME/.cache/attnkit.
std::string CacheDir();
// "<cache>/<prefix>-<cpu model as a file name><suffix>".
std::string CachePath(const std::string& prefix, const std::string& suffix);
// Creates CacheDir() and its parents; false when that is not possible.
bool EnsureCacheDir();

// Current UTC time as ISO 8601.
std::string NowUtc();

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_MACHINE_INFO_H_

#include "platform/machine_info.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace attnkit {

std::string CpuInfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (parts.size() == 2 && absl::StripAsciiWhitespace(parts[0]) == key) {
      return std::string(absl::StripAsciiWhitespace(parts[1]));
    }
  }
  return "";
}

std::string CpuModel() {
  // Read once: /proc/cpuinfo costs tens of microseconds per read, and auto
  // asks on every call.
  static const std::string* model = [] {
    const std::string m = CpuInfoField("model name");
    return new std::string(m.empty() ? "unknown-cpu" : m);
  }();
  return *model;
}

std::string CacheDir() {
  if (const char* dir = std::getenv("ATTNKIT_CACHE_DIR")) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return absl::StrCat(xdg, "/attnkit");
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "/tmp", "/.cache/attnkit");
}

std::string CachePath(const std::string& prefix, const std::string& suffix) {
  std::string cpu = CpuModel();
  for (char& c : cpu) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return absl::StrCat(CacheDir(), "/", prefix, "-", cpu, suffix);
}

bool EnsureCacheDir() {
  std::string partial;
  for (absl::string_view part : absl::StrSplit(CacheDir(), '/', absl::SkipEmpty())) {
    absl::StrAppend(&partial, "/", part);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int CoreCount() {
  static const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return cores;
}

int64_t LastLevelCacheBytes() {
  int64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", index);
    std::ifstream type_file(dir + "/type"), size_file(dir + "/size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || size.empty()) continue;
    int64_t scale = 1;
    if (size.back() == 'K') scale = int64_t{1} << 10;
    if (size.back() == 'M') scale = int64_t{1} << 20;
    if (scale != 1) size.pop_back();
    int64_t value = 0;
    if (absl::SimpleAtoi(size, &value)) largest = std::max(largest, value * scale);
  }
  return largest;
}

}  // namespace attnkit

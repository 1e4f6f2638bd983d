// Fuzzes the plugin loader with files that are not valid plugins: any bytes
// written to a file must give an error status naming the file, never a crash.
// (A file that passes the ELF checks is handed to dlopen, which runs its
// initialisers: plugins are code, so the checks guard against accidents such
// as a truncated or foreign file, not against a hostile library.)
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/registry.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::string ScratchPath() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir == nullptr) dir = std::getenv("TMPDIR");
  if (dir == nullptr) dir = "/tmp";
  return std::string(dir) + "/plugin_fuzz_" + std::to_string(getpid()) + ".so";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = ScratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write %s", path.c_str());
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  attnkit::BackendRegistry registry;
  const absl::Status s = registry.LoadPlugin(path);
  if (!s.ok()) {
    FUZZ_CHECK(std::string(s.message()).find(path) != std::string::npos,
               "error does not name the file: %s", std::string(s.message()).c_str());
  }
  return 0;
}

// Fuzzes the checks that stand between a plugin file and dlopen: any bytes
// must either pass CheckElfImage or be refused, by it and by LoadPlugin, with
// an error naming the file; never a crash, a hang or a read outside the bytes.
//
// Files that pass are not handed to dlopen here. Loading runs the file's
// relocations (including IFUNC resolvers) and initialisers, which are code:
// a mutated library that is structurally sound can still do anything, and
// the loader is not the code under test. The checks guard against accidents
// such as a truncated, foreign or damaged file, not against a hostile
// library (plugins are trusted code); that real libraries pass them and
// load is tested in //tests:elf_image_test.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "plugin/elf_image.h"
#include "plugin/registry.h"
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
  const absl::Status checked =
      attnkit::CheckElfImage(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (checked.ok()) return 0;  // would reach dlopen: see the comment above
  static const std::string path = ScratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write %s", path.c_str());
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  attnkit::BackendRegistry registry;
  const absl::Status s = registry.LoadPlugin(path);
  FUZZ_CHECK(!s.ok(), "LoadPlugin accepted a file CheckElfImage refused: %s",
             std::string(checked.message()).c_str());
  FUZZ_CHECK(std::string(s.message()).find(path) != std::string::npos,
             "error does not name the file: %s", std::string(s.message()).c_str());
  FUZZ_CHECK(std::string(s.message()).find(std::string(checked.message())) != std::string::npos,
             "LoadPlugin's error (%s) does not carry the check's (%s)",
             std::string(s.message()).c_str(), std::string(checked.message()).c_str());
  return 0;
}

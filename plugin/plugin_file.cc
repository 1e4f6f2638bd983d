#include "plugin/plugin_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "plugin/elf_image.h"

namespace attnkit {

absl::Status CheckPluginFile(const std::string& path) {
  auto cannot_load = [&](const char* what) {
    return absl::NotFoundError(
        absl::StrFormat("plugin %s: cannot load: %s: %s", path, what, std::strerror(errno)));
  };
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot_load("open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const absl::Status s = cannot_load("fstat");
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("plugin %s: not a regular file", path));
  }
  // The whole file is checked: relocations and hash tables may lie anywhere.
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = size == 0 ? nullptr : mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    const absl::Status s = cannot_load("mmap");
    close(fd);
    return s;
  }
  close(fd);
  const absl::Status s =
      CheckElfImage(absl::string_view(static_cast<const char*>(map), map == nullptr ? 0 : size));
  if (map != nullptr) munmap(map, size);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("plugin %s: not a shared library for this machine: %s", path, s.message()));
  }
  return absl::OkStatus();
}

}  // namespace attnkit

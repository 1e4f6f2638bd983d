#include "core/plugin_file.h"

#include <elf.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"

namespace attnkit {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#else
#error "attnkit plugins: add this machine's ELF e_machine"
#endif

// Enough for the ELF header and a generous program header table.
constexpr size_t kPrefixBytes = 64 * 1024;

absl::Status Bad(const std::string& why) { return absl::InvalidArgumentError(why); }

// [offset, offset + size) lies inside [0, limit), without overflow.
bool Inside(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

absl::Status CheckElfImage(absl::string_view bytes, uint64_t file_size) {
  Elf64_Ehdr eh;
  if (bytes.size() < sizeof(eh)) {
    return Bad(absl::StrFormat("%d bytes is shorter than an ELF header (64)", bytes.size()));
  }
  std::memcpy(&eh, bytes.data(), sizeof(eh));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return Bad("no ELF magic (\\x7fELF)");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return Bad("ELF class is not 64-bit");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return Bad("ELF data is not little-endian");
  if (eh.e_type != ET_DYN) {
    return Bad(
        absl::StrFormat("e_type (%d) is not ET_DYN (%d), a shared object", eh.e_type, ET_DYN));
  }
  if (eh.e_machine != kMachine) {
    return Bad(
        absl::StrFormat("e_machine (%d) is not this machine's (%d)", eh.e_machine, kMachine));
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return Bad(absl::StrFormat("e_phentsize (%d) must be %d", eh.e_phentsize, sizeof(Elf64_Phdr)));
  }
  if (eh.e_phnum == 0 || eh.e_phnum == PN_XNUM) {
    return Bad(absl::StrFormat("e_phnum (%d) must be in [1, %d)", eh.e_phnum, PN_XNUM));
  }
  const uint64_t table = uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr);
  if (!Inside(eh.e_phoff, table, bytes.size())) {
    return Bad(absl::StrFormat("program headers [%d, +%d) lie outside the first %d bytes",
                               eh.e_phoff, table, bytes.size()));
  }
  bool has_load = false, has_dynamic = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (!Inside(ph.p_offset, ph.p_filesz, file_size)) {
      return Bad(absl::StrFormat(
          "segment %d (file bytes [%d, +%d)) reaches past the end of the file (%d bytes)", i,
          ph.p_offset, ph.p_filesz, file_size));
    }
    if (ph.p_type == PT_LOAD) {
      has_load = true;
      if (ph.p_filesz > ph.p_memsz) {
        return Bad(absl::StrFormat("segment %d: p_filesz (%d) > p_memsz (%d)", i, ph.p_filesz,
                                   ph.p_memsz));
      }
      if (ph.p_align > 1 &&
          ((ph.p_align & (ph.p_align - 1)) != 0 || (ph.p_vaddr - ph.p_offset) % ph.p_align != 0)) {
        return Bad(
            absl::StrFormat("segment %d: p_align (%d) is not a power of two dividing "
                            "p_vaddr - p_offset",
                            i, ph.p_align));
      }
    } else {
      has_dynamic = true;
    }
  }
  if (!has_load) return Bad("no loadable segment (PT_LOAD)");
  if (!has_dynamic) return Bad("no dynamic segment (PT_DYNAMIC)");
  return absl::OkStatus();
}

absl::Status CheckPluginFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrFormat("plugin %s: cannot load: %s", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("plugin %s: not a regular file", path));
  }
  std::ifstream in(path, std::ios::binary);
  std::string prefix(kPrefixBytes, '\0');
  in.read(&prefix[0], static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<size_t>(in.gcount()));
  const absl::Status s = CheckElfImage(prefix, static_cast<uint64_t>(st.st_size));
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("plugin %s: not a shared library for this machine: %s", path, s.message()));
  }
  return absl::OkStatus();
}

}  // namespace attnkit

// CheckElfImage: real shared libraries pass (and the registry's dlopen path
// takes them), and each kind of damage that makes glibc's loader fault is
// refused with the field named. The damaged files are a real library with
// one field changed.
#include "plugin/elf_image.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/plugin_file.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// Libraries built by this repository, with gcc and with clang/libc++.
const char* const kBuilt[] = {
    "backends/reference/libattnkit_reference_plugin.so",
    "backends/plugins/libattnkit_highway.so",
    "backends/plugins/libattnkit_blas.so",
    "backends/plugins/libattnkit_onednn.so",
    "tests/abi/libattnkit_libcxx_plugin.so",
    "tests/testdata/libnot_a_plugin.so",
    "tests/testdata/libolder_table_plugin.so",
};

// The system's own libraries: glibc (with IFUNCs, TLS, versions), the C++
// runtimes, OpenBLAS, and CUDA's runtime when it is installed.
const char* const kSystem[] = {
    "/lib/x86_64-linux-gnu/libc.so.6",        "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libstdc++.so.6",   "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/libopenblas.so.0", "/lib/x86_64-linux-gnu/libprotobuf.so.32",
    "/usr/lib/llvm-14/lib/libc++.so.1",       "/usr/local/cuda/lib64/libcudart.so",
};

TEST(ElfImageTest, RealLibrariesPass) {
  for (const char* path : kBuilt) {
    const std::string image = ReadFile(path);
    ASSERT_FALSE(image.empty()) << path;
    EXPECT_TRUE(CheckElfImage(image).ok()) << path << ": " << CheckElfImage(image);
    EXPECT_TRUE(CheckPluginFile(path).ok()) << CheckPluginFile(path);
  }
  int seen = 0;
  for (const char* path : kSystem) {
    if (!Exists(path)) continue;
    ++seen;
    const std::string image = ReadFile(path);
    EXPECT_TRUE(CheckElfImage(image).ok()) << path << ": " << CheckElfImage(image);
  }
  EXPECT_GE(seen, 4) << "the system libraries this test expects are missing";
}

// A copy of a real library with accessors for the fields the tests change.
class Damaged {
 public:
  Damaged() : image_(ReadFile("tests/testdata/libnot_a_plugin.so")) {}

  std::string& image() { return image_; }
  Elf64_Ehdr* Header() { return reinterpret_cast<Elf64_Ehdr*>(&image_[0]); }
  Elf64_Phdr* Segment(uint32_t type, int nth = 0) {
    for (int i = 0; i < Header()->e_phnum; ++i) {
      auto* ph = reinterpret_cast<Elf64_Phdr*>(&image_[Header()->e_phoff + i * sizeof(Elf64_Phdr)]);
      if (ph->p_type == type && nth-- == 0) return ph;
    }
    return nullptr;
  }
  // The file offset of an address in the image.
  uint64_t Offset(uint64_t vaddr) {
    for (int i = 0; Elf64_Phdr* ph = Segment(PT_LOAD, i); ++i) {
      if (vaddr >= ph->p_vaddr && vaddr - ph->p_vaddr < ph->p_filesz) {
        return ph->p_offset + (vaddr - ph->p_vaddr);
      }
    }
    ADD_FAILURE() << "address " << vaddr << " is not in the file";
    return 0;
  }
  Elf64_Dyn* Dynamic(int64_t tag) {
    const Elf64_Phdr* dyn = Segment(PT_DYNAMIC);
    auto* d = reinterpret_cast<Elf64_Dyn*>(&image_[dyn->p_offset]);
    for (; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == tag) return d;
    }
    ADD_FAILURE() << "no dynamic entry " << tag;
    return d;
  }
  template <typename T>
  T* At(uint64_t vaddr) {
    return reinterpret_cast<T*>(&image_[Offset(vaddr)]);
  }

  std::string Refusal() {
    const absl::Status s = CheckElfImage(image_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  }

 private:
  std::string image_;
};

TEST(ElfImageTest, TheUndamagedCopyPasses) {
  Damaged d;
  EXPECT_TRUE(CheckElfImage(d.image()).ok()) << CheckElfImage(d.image());
}

TEST(ElfImageTest, RefusesHeaderAndSegmentDamage) {
  {
    // Cut inside the last loadable segment's file bytes (the tail of the file
    // may be section headers, which the loader never reads).
    Damaged d;
    uint64_t end = 0;
    for (int i = 0; Elf64_Phdr* ph = d.Segment(PT_LOAD, i); ++i) end = ph->p_offset + ph->p_filesz;
    d.image().resize(end - 1);
    EXPECT_THAT(d.Refusal(), HasSubstr("reaches past the end of the file"));
  }
  {
    Damaged d;
    d.Header()->e_machine = EM_AARCH64;
    EXPECT_THAT(d.Refusal(), HasSubstr("e_machine (183) is not this machine's (62)"));
  }
  {
    Damaged d;
    Elf64_Phdr* first = d.Segment(PT_LOAD, 0);
    Elf64_Phdr* second = d.Segment(PT_LOAD, 1);
    std::swap(*first, *second);
    EXPECT_THAT(d.Refusal(), HasSubstr("loadable segments must ascend without overlapping"));
  }
  {
    Damaged d;
    d.Segment(PT_DYNAMIC)->p_vaddr = 0x7000000000;
    EXPECT_THAT(d.Refusal(), HasSubstr("the dynamic segment [0x7000000000"));
  }
  {
    Damaged d;
    d.Segment(PT_GNU_RELRO)->p_vaddr = 0x7000000000;
    EXPECT_THAT(d.Refusal(), HasSubstr("lies outside every loadable segment"));
  }
  {
    Damaged d;
    d.Segment(PT_NOTE)->p_filesz += 1 << 20;
    EXPECT_THAT(d.Refusal(), HasSubstr("(note, "));
  }
}

TEST(ElfImageTest, RefusesDynamicTableDamage) {
  {
    Damaged d;
    d.Dynamic(DT_RELA)->d_un.d_ptr = 0x7000000000;
    EXPECT_THAT(d.Refusal(), HasSubstr("dynamic entry DT_RELA (0x7000000000) lies outside"));
  }
  {
    Damaged d;
    d.Dynamic(DT_STRSZ)->d_un.d_val = 1;
    EXPECT_THAT(d.Refusal(), HasSubstr("dynamic entry DT_NEEDED"));
  }
  {
    Damaged d;
    d.Dynamic(DT_RELAENT)->d_un.d_val = 16;
    EXPECT_THAT(d.Refusal(), HasSubstr("DT_RELAENT (16) must be 24"));
  }
  {
    Damaged d;
    d.Dynamic(DT_RELASZ)->d_un.d_val += 1 << 30;
    EXPECT_THAT(d.Refusal(), HasSubstr("relocation table DT_RELA"));
  }
}

TEST(ElfImageTest, RefusesRelocationAndSymbolDamage) {
  {
    // A relocation aimed at the read-only first segment.
    Damaged d;
    d.At<Elf64_Rela>(d.Dynamic(DT_RELA)->d_un.d_ptr)->r_offset = d.Segment(PT_LOAD, 0)->p_vaddr;
    EXPECT_THAT(d.Refusal(), HasSubstr("outside every writable loadable segment"));
  }
  {
    Damaged d;
    d.At<Elf64_Rela>(d.Dynamic(DT_JMPREL)->d_un.d_ptr)->r_info =
        ELF64_R_INFO(1u << 30, R_X86_64_JUMP_SLOT);
    EXPECT_THAT(d.Refusal(), HasSubstr("symbol 1073741824 lies outside the file image"));
  }
  {
    Damaged d;
    const uint64_t gnu_hash = d.Dynamic(DT_GNU_HASH)->d_un.d_ptr;
    d.At<uint32_t>(gnu_hash)[0] = 0;  // nbuckets
    EXPECT_THAT(d.Refusal(), HasSubstr("DT_GNU_HASH: nbuckets (0) must be positive"));
  }
  {
    Damaged d;
    const uint64_t versym = d.Dynamic(DT_VERSYM)->d_un.d_ptr;
    d.At<uint16_t>(versym)[1] = 0x7ff0;  // symbol 1's version
    EXPECT_THAT(d.Refusal(), HasSubstr("version index (32752) exceeds the largest defined"));
  }
  {
    Damaged d;
    const uint64_t verneed = d.Dynamic(DT_VERNEED)->d_un.d_ptr;
    d.At<Elf64_Verneed>(verneed)->vn_file = 1 << 30;
    EXPECT_THAT(d.Refusal(), HasSubstr("vn_file (1073741824) lies outside the string table"));
  }
}

// What LoadPlugin refuses it never hands to dlopen, and it names the file.
TEST(ElfImageTest, PluginFileCarriesTheReason) {
  Damaged d;
  d.Segment(PT_DYNAMIC)->p_vaddr = 0x7000000000;
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/damaged.so";
  std::ofstream(path, std::ios::binary) << d.image();
  const absl::Status s = CheckPluginFile(path);
  EXPECT_THAT(std::string(s.message()), HasSubstr("plugin " + path +
                                                  ": not a shared library for this machine: the "
                                                  "dynamic segment"));
}

}  // namespace
}  // namespace attnkit

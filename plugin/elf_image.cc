#include "plugin/elf_image.h"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

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

// glibc maps segments in whole pages: a write that starts inside a segment
// may end anywhere in its last page.
constexpr uint64_t kPage = 4096;

#ifndef PT_GNU_PROPERTY
#define PT_GNU_PROPERTY 0x6474e553
#endif
#ifndef DT_RELRSZ
#define DT_RELRSZ 35
#define DT_RELR 36
#define DT_RELRENT 37
#endif

absl::Status Bad(const std::string& why) { return absl::InvalidArgumentError(why); }

// [offset, offset + size) lies inside [0, limit), without overflow.
bool Inside(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

bool PowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

struct Load {
  uint64_t vaddr, memsz, offset, filesz;
  bool writable;
};

// The file's loadable segments, as the loader will map them (relative to the
// load address).
class Image {
 public:
  Image(absl::string_view bytes, std::vector<Load> loads)
      : bytes_(bytes), loads_(std::move(loads)) {}

  // The segment whose memory holds [addr, addr + size) (the write may run to
  // the end of the segment's last page), or nullptr.
  const Load* Mapped(uint64_t addr, uint64_t size) const {
    for (const Load& l : loads_) {
      if (addr < l.vaddr || addr - l.vaddr >= l.memsz) continue;
      const uint64_t end = l.vaddr + l.memsz;  // no overflow: checked per segment
      const uint64_t page_end = end + (kPage - end % kPage) % kPage;
      if (page_end >= end && Inside(addr - l.vaddr, size, page_end - l.vaddr)) return &l;
    }
    return nullptr;
  }

  // The file bytes that the loader places at [addr, addr + size), when one
  // segment's file part holds all of them; nullptr otherwise.
  const char* FileBytes(uint64_t addr, uint64_t size) const {
    for (const Load& l : loads_) {
      if (addr >= l.vaddr && Inside(addr - l.vaddr, size, l.filesz)) {
        return bytes_.data() + l.offset + (addr - l.vaddr);
      }
    }
    return nullptr;
  }

  uint64_t size() const { return bytes_.size(); }

  template <typename T>
  bool Read(uint64_t addr, T* out) const {
    const char* p = FileBytes(addr, sizeof(T));
    if (p == nullptr) return false;
    std::memcpy(out, p, sizeof(T));
    return true;
  }

 private:
  absl::string_view bytes_;
  std::vector<Load> loads_;
};

absl::Status CheckHeader(absl::string_view bytes, Elf64_Ehdr* eh) {
  if (bytes.size() < sizeof(*eh)) {
    return Bad(absl::StrFormat("%d bytes is shorter than an ELF header (64)", bytes.size()));
  }
  std::memcpy(eh, bytes.data(), sizeof(*eh));
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return Bad("no ELF magic (\\x7fELF)");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64) return Bad("ELF class is not 64-bit");
  if (eh->e_ident[EI_DATA] != ELFDATA2LSB) return Bad("ELF data is not little-endian");
  if (eh->e_type != ET_DYN) {
    return Bad(
        absl::StrFormat("e_type (%d) is not ET_DYN (%d), a shared object", eh->e_type, ET_DYN));
  }
  if (eh->e_machine != kMachine) {
    return Bad(
        absl::StrFormat("e_machine (%d) is not this machine's (%d)", eh->e_machine, kMachine));
  }
  if (eh->e_phentsize != sizeof(Elf64_Phdr)) {
    return Bad(absl::StrFormat("e_phentsize (%d) must be %d", eh->e_phentsize, sizeof(Elf64_Phdr)));
  }
  if (eh->e_phnum == 0 || eh->e_phnum == PN_XNUM) {
    return Bad(absl::StrFormat("e_phnum (%d) must be in [1, %d)", eh->e_phnum, PN_XNUM));
  }
  const uint64_t table = uint64_t{eh->e_phnum} * sizeof(Elf64_Phdr);
  if (!Inside(eh->e_phoff, table, bytes.size())) {
    return Bad(absl::StrFormat("program headers [%d, +%d) lie outside the file (%d bytes)",
                               eh->e_phoff, table, bytes.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckLoad(const Elf64_Phdr& ph, int i, uint64_t file_size, const Load* previous) {
  if (!Inside(ph.p_offset, ph.p_filesz, file_size)) {
    return Bad(absl::StrFormat(
        "segment %d (file bytes [%d, +%d)) reaches past the end of the file (%d bytes)", i,
        ph.p_offset, ph.p_filesz, file_size));
  }
  if (ph.p_filesz > ph.p_memsz) {
    return Bad(
        absl::StrFormat("segment %d: p_filesz (%d) > p_memsz (%d)", i, ph.p_filesz, ph.p_memsz));
  }
  constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max() - kPage;
  if (ph.p_vaddr > kTop || ph.p_memsz > kTop - ph.p_vaddr) {
    return Bad(absl::StrFormat("segment %d: p_vaddr (%#x) + p_memsz (%#x) overflows", i, ph.p_vaddr,
                               ph.p_memsz));
  }
  if (ph.p_align > 1 && (!PowerOfTwo(ph.p_align) || (ph.p_vaddr - ph.p_offset) % ph.p_align != 0)) {
    return Bad(absl::StrFormat(
        "segment %d: p_align (%d) is not a power of two dividing p_vaddr - p_offset", i,
        ph.p_align));
  }
  if (previous != nullptr && ph.p_vaddr < previous->vaddr + previous->memsz) {
    return Bad(absl::StrFormat(
        "segment %d: p_vaddr (%#x) is below the end of the previous loadable segment (%#x); "
        "loadable segments must ascend without overlapping",
        i, ph.p_vaddr, previous->vaddr + previous->memsz));
  }
  return absl::OkStatus();
}

// Notes (PT_NOTE, PT_GNU_PROPERTY) are read by the loader: each header and
// its padded name and descriptor must lie inside the segment's file bytes.
absl::Status CheckNotes(const Image& image, const Elf64_Phdr& ph, int i) {
  const char* p = image.FileBytes(ph.p_vaddr, ph.p_filesz);
  if (p == nullptr || ph.p_filesz != ph.p_memsz) {
    return Bad(absl::StrFormat(
        "segment %d (note, [%#x, +%d)) is not held whole by a loadable segment's file bytes", i,
        ph.p_vaddr, ph.p_memsz));
  }
  // The descriptor starts, and the next note starts, at the alignment
  // (4, or 8 for GNU property notes) after the 12-byte header and the name.
  const uint64_t align = ph.p_align == 8 ? 8 : 4;
  auto padded = [&](uint64_t n) { return (n + align - 1) / align * align; };
  uint64_t at = 0;
  while (ph.p_filesz - at >= sizeof(Elf64_Nhdr)) {
    Elf64_Nhdr nh;
    std::memcpy(&nh, p + at, sizeof(nh));
    const uint64_t desc = padded(at + sizeof(nh) + nh.n_namesz);
    if (desc > ph.p_filesz || nh.n_descsz > ph.p_filesz - desc) {
      return Bad(absl::StrFormat(
          "segment %d: the note at byte %d (n_namesz %d, n_descsz %d) runs past the segment "
          "(%d bytes)",
          i, at, nh.n_namesz, nh.n_descsz, ph.p_filesz));
    }
    at = std::min<uint64_t>(padded(desc + nh.n_descsz), ph.p_filesz);
  }
  return absl::OkStatus();
}

// The other program headers the loader reads: they must lie in loaded memory.
absl::Status CheckAuxiliary(const Image& image, const Elf64_Phdr& ph, int i) {
  switch (ph.p_type) {
    case PT_NOTE:
    case PT_GNU_PROPERTY:
      return CheckNotes(image, ph, i);
    case PT_TLS:
      if (ph.p_align > 1 && !PowerOfTwo(ph.p_align)) {
        return Bad(
            absl::StrFormat("segment %d (TLS): p_align (%d) is not a power of two", i, ph.p_align));
      }
      if (ph.p_filesz > ph.p_memsz ||
          (ph.p_filesz > 0 && image.FileBytes(ph.p_vaddr, ph.p_filesz) == nullptr)) {
        return Bad(absl::StrFormat(
            "segment %d (TLS): its initial image [%#x, +%d) is not held by a loadable "
            "segment's file bytes",
            i, ph.p_vaddr, ph.p_filesz));
      }
      return absl::OkStatus();
    case PT_GNU_RELRO:
    case PT_GNU_EH_FRAME:
      if (ph.p_memsz > 0 && image.Mapped(ph.p_vaddr, ph.p_memsz) == nullptr) {
        return Bad(
            absl::StrFormat("segment %d (type %#x, [%#x, +%d)) lies outside every "
                            "loadable segment",
                            i, ph.p_type, ph.p_vaddr, ph.p_memsz));
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

struct TagName {
  int64_t tag;
  const char* name;
};

// The dynamic entries whose values are addresses in the image.
constexpr TagName kAddressTags[] = {
    {DT_PLTGOT, "DT_PLTGOT"},
    {DT_HASH, "DT_HASH"},
    {DT_STRTAB, "DT_STRTAB"},
    {DT_SYMTAB, "DT_SYMTAB"},
    {DT_RELA, "DT_RELA"},
    {DT_INIT, "DT_INIT"},
    {DT_FINI, "DT_FINI"},
    {DT_REL, "DT_REL"},
    {DT_JMPREL, "DT_JMPREL"},
    {DT_INIT_ARRAY, "DT_INIT_ARRAY"},
    {DT_FINI_ARRAY, "DT_FINI_ARRAY"},
    {DT_PREINIT_ARRAY, "DT_PREINIT_ARRAY"},
    {DT_GNU_HASH, "DT_GNU_HASH"},
    {DT_VERSYM, "DT_VERSYM"},
    {DT_VERDEF, "DT_VERDEF"},
    {DT_VERNEED, "DT_VERNEED"},
    {DT_RELR, "DT_RELR"},
};

// The dynamic entries whose values are offsets into the string table.
constexpr TagName kStringTags[] = {
    {DT_NEEDED, "DT_NEEDED"},   {DT_SONAME, "DT_SONAME"},       {DT_RPATH, "DT_RPATH"},
    {DT_RUNPATH, "DT_RUNPATH"}, {DT_AUXILIARY, "DT_AUXILIARY"}, {DT_FILTER, "DT_FILTER"},
};

// The dynamic table, read as the loader reads it.
class Dynamic {
 public:
  explicit Dynamic(const Image& image) : image_(image) {}

  absl::Status Parse(const Elf64_Phdr& ph) {
    const char* p = image_.FileBytes(ph.p_vaddr, ph.p_filesz);
    if (p == nullptr) {
      return Bad(absl::StrFormat(
          "the dynamic segment [%#x, +%d) is not held by a loadable segment's file bytes",
          ph.p_vaddr, ph.p_filesz));
    }
    for (uint64_t at = 0; ph.p_filesz - at >= sizeof(Elf64_Dyn); at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, p + at, sizeof(d));
      if (d.d_tag == DT_NULL) return absl::OkStatus();
      entries_.push_back(d);
    }
    return Bad(absl::StrFormat("the dynamic table (%d bytes) has no DT_NULL entry", ph.p_filesz));
  }

  bool Has(int64_t tag) const { return Find(tag) != nullptr; }
  uint64_t Get(int64_t tag) const {
    const Elf64_Dyn* d = Find(tag);
    return d == nullptr ? 0 : d->d_un.d_val;
  }
  const std::vector<Elf64_Dyn>& entries() const { return entries_; }

 private:
  // The loader keeps the last entry of each tag.
  const Elf64_Dyn* Find(int64_t tag) const {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->d_tag == tag) return &*it;
    }
    return nullptr;
  }

  const Image& image_;
  std::vector<Elf64_Dyn> entries_;
};

class DynamicChecker {
 public:
  DynamicChecker(const Image& image, const Dynamic& dyn) : image_(image), dyn_(dyn) {}

  absl::Status Check() {
    for (const TagName& t : kAddressTags) {
      if (dyn_.Has(t.tag) && image_.Mapped(dyn_.Get(t.tag), 1) == nullptr) {
        return Bad(absl::StrFormat("dynamic entry %s (%#x) lies outside every loadable segment",
                                   t.name, dyn_.Get(t.tag)));
      }
    }
    if (absl::Status s = CheckEntrySizes(); !s.ok()) return s;
    if (absl::Status s = CheckStrings(); !s.ok()) return s;
    if (absl::Status s = CheckVersions(); !s.ok()) return s;
    if (absl::Status s = CheckFunctionArrays(); !s.ok()) return s;
    if (absl::Status s = CheckRelocations(); !s.ok()) return s;
    if (absl::Status s = CheckGnuHash(); !s.ok()) return s;
    return CheckSysvHash();
  }

 private:
  absl::Status CheckEntrySizes() const {
    const TagName sized[] = {{DT_SYMENT, "DT_SYMENT"},
                             {DT_RELAENT, "DT_RELAENT"},
                             {DT_RELENT, "DT_RELENT"},
                             {DT_RELRENT, "DT_RELRENT"}};
    const uint64_t sizes[] = {sizeof(Elf64_Sym), sizeof(Elf64_Rela), sizeof(Elf64_Rel), 8};
    for (int i = 0; i < 4; ++i) {
      if (dyn_.Has(sized[i].tag) && dyn_.Get(sized[i].tag) != sizes[i]) {
        return Bad(absl::StrFormat("dynamic entry %s (%d) must be %d", sized[i].name,
                                   dyn_.Get(sized[i].tag), sizes[i]));
      }
    }
    if (dyn_.Has(DT_PLTREL) && dyn_.Get(DT_PLTREL) != DT_RELA && dyn_.Get(DT_PLTREL) != DT_REL) {
      return Bad(absl::StrFormat("dynamic entry DT_PLTREL (%d) must be DT_RELA (%d) or DT_REL (%d)",
                                 dyn_.Get(DT_PLTREL), DT_RELA, DT_REL));
    }
    return absl::OkStatus();
  }

  // The string table lies in the file image and ends in NUL, so every string
  // that starts inside it ends inside it.
  absl::Status CheckStrings() {
    if (dyn_.Has(DT_STRTAB)) {
      strsz_ = dyn_.Get(DT_STRSZ);
      strtab_ = image_.FileBytes(dyn_.Get(DT_STRTAB), strsz_);
      if (!dyn_.Has(DT_STRSZ) || strtab_ == nullptr || strsz_ == 0 || strtab_[strsz_ - 1] != 0) {
        return Bad(absl::StrFormat(
            "the string table (DT_STRTAB %#x, DT_STRSZ %d) is not a NUL-terminated table held "
            "by a loadable segment's file bytes",
            dyn_.Get(DT_STRTAB), strsz_));
      }
    }
    for (const Elf64_Dyn& d : dyn_.entries()) {
      for (const TagName& t : kStringTags) {
        if (d.d_tag == t.tag && d.d_un.d_val >= strsz_) {
          return Bad(
              absl::StrFormat("dynamic entry %s (%d) lies outside the string table (%d bytes)",
                              t.name, d.d_un.d_val, strsz_));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckString(uint64_t offset, const char* what) const {
    if (offset >= strsz_) {
      return Bad(absl::StrFormat("%s (%d) lies outside the string table (%d bytes)", what, offset,
                                 strsz_));
    }
    return absl::OkStatus();
  }

  // The version tables the loader walks. It follows vn_next/vd_next and
  // vna_next/vda_next until a zero (ignoring the counts), sizes its version
  // array by the largest index named, and indexes that array with
  // DT_VERSYM's entries unchecked.
  absl::Status CheckVersions() {
    if (dyn_.Has(DT_VERNEED)) {
      uint64_t at = dyn_.Get(DT_VERNEED), records = 0;
      for (;;) {
        Elf64_Verneed vn;
        if (!image_.Read(at, &vn)) return OutsideImage("Elf64_Verneed", at);
        if (absl::Status s = CheckString(vn.vn_file, "vn_file"); !s.ok()) return s;
        for (uint64_t aux = at + vn.vn_aux;;) {
          Elf64_Vernaux va;
          if (++records > MaxRecords()) return Bad("DT_VERNEED's records form a cycle");
          if (!image_.Read(aux, &va)) return OutsideImage("Elf64_Vernaux", aux);
          if (absl::Status s = CheckString(va.vna_name, "vna_name"); !s.ok()) return s;
          max_version_ = std::max<uint64_t>(max_version_, va.vna_other & 0x7fff);
          if (va.vna_next == 0) break;
          aux += va.vna_next;
        }
        if (vn.vn_next == 0) break;
        at += vn.vn_next;
      }
    }
    if (dyn_.Has(DT_VERDEF)) {
      uint64_t at = dyn_.Get(DT_VERDEF), records = 0;
      for (;;) {
        Elf64_Verdef vd;
        if (!image_.Read(at, &vd)) return OutsideImage("Elf64_Verdef", at);
        max_version_ = std::max<uint64_t>(max_version_, vd.vd_ndx & 0x7fff);
        for (uint64_t aux = at + vd.vd_aux;;) {
          Elf64_Verdaux va;
          if (++records > MaxRecords()) return Bad("DT_VERDEF's records form a cycle");
          if (!image_.Read(aux, &va)) return OutsideImage("Elf64_Verdaux", aux);
          if (absl::Status s = CheckString(va.vda_name, "vda_name"); !s.ok()) return s;
          if (va.vda_next == 0) break;
          aux += va.vda_next;
        }
        if (vd.vd_next == 0) break;
        at += vd.vd_next;
      }
    }
    if (dyn_.Has(DT_VERSYM) && !dyn_.Has(DT_VERNEED) && !dyn_.Has(DT_VERDEF)) {
      return Bad("dynamic entry DT_VERSYM is present without DT_VERNEED or DT_VERDEF");
    }
    return absl::OkStatus();
  }

  // No file holds more version records than 8-byte slots: a longer walk
  // revisits records (a cycle through a next field).
  uint64_t MaxRecords() const { return image_.size() / 8 + 1; }

  absl::Status OutsideImage(const char* what, uint64_t addr) const {
    return Bad(
        absl::StrFormat("%s at %#x is not held by a loadable segment's file bytes", what, addr));
  }

  // Symbol `index` of DT_SYMTAB, with its name and version entry.
  absl::Status CheckSymbol(uint64_t index) const {
    if (!dyn_.Has(DT_SYMTAB)) return Bad("symbols are referenced but there is no DT_SYMTAB");
    Elf64_Sym sym;
    const uint64_t at = dyn_.Get(DT_SYMTAB) + index * sizeof(Elf64_Sym);
    if (index > (uint64_t{1} << 40) || !image_.Read(at, &sym)) {
      return Bad(absl::StrFormat("symbol %d lies outside the file image", index));
    }
    if (absl::Status s = CheckString(sym.st_name, "a symbol's st_name"); !s.ok()) return s;
    if (dyn_.Has(DT_VERSYM)) {
      uint16_t version;
      if (!image_.Read(dyn_.Get(DT_VERSYM) + index * 2, &version)) {
        return Bad(
            absl::StrFormat("symbol %d's DT_VERSYM entry lies outside the file image", index));
      }
      if ((version & 0x7fff) > max_version_) {
        return Bad(
            absl::StrFormat("symbol %d's version index (%d) exceeds the largest defined (%d)",
                            index, version & 0x7fff, max_version_));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckFunctionArrays() const {
    const TagName arrays[][2] = {
        {{DT_INIT_ARRAY, "DT_INIT_ARRAY"}, {DT_INIT_ARRAYSZ, ""}},
        {{DT_FINI_ARRAY, "DT_FINI_ARRAY"}, {DT_FINI_ARRAYSZ, ""}},
        {{DT_PREINIT_ARRAY, "DT_PREINIT_ARRAY"}, {DT_PREINIT_ARRAYSZ, ""}}};
    for (const auto& a : arrays) {
      if (!dyn_.Has(a[0].tag)) continue;
      const uint64_t size = dyn_.Get(a[1].tag);
      if (size % 8 != 0 || image_.Mapped(dyn_.Get(a[0].tag), size) == nullptr) {
        return Bad(absl::StrFormat("%s [%#x, +%d) is not whole pointers inside a loadable segment",
                                   a[0].name, dyn_.Get(a[0].tag), size));
      }
    }
    return absl::OkStatus();
  }

  // Every relocation writes inside writable loaded memory (or any loaded
  // memory when the object declares text relocations).
  absl::Status CheckRelocations() const {
    const bool textrel = dyn_.Has(DT_TEXTREL) || (dyn_.Get(DT_FLAGS) & DF_TEXTREL) != 0;
    const bool plt_rela = !dyn_.Has(DT_PLTREL) || dyn_.Get(DT_PLTREL) == DT_RELA;
    struct Table {
      int64_t addr_tag, size_tag;
      const char* name;
      uint64_t entsize;
    };
    const Table tables[] = {
        {DT_RELA, DT_RELASZ, "DT_RELA", sizeof(Elf64_Rela)},
        {DT_REL, DT_RELSZ, "DT_REL", sizeof(Elf64_Rel)},
        {DT_JMPREL, DT_PLTRELSZ, "DT_JMPREL", plt_rela ? sizeof(Elf64_Rela) : sizeof(Elf64_Rel)},
    };
    for (const Table& t : tables) {
      if (!dyn_.Has(t.addr_tag)) continue;
      const uint64_t addr = dyn_.Get(t.addr_tag), size = dyn_.Get(t.size_tag);
      const char* p = image_.FileBytes(addr, size);
      if (!dyn_.Has(t.size_tag) || size % t.entsize != 0 || p == nullptr) {
        return Bad(absl::StrFormat(
            "relocation table %s [%#x, +%d) is not whole %d-byte entries held by a loadable "
            "segment's file bytes",
            t.name, addr, size, t.entsize));
      }
      for (uint64_t at = 0; at < size; at += t.entsize) {
        Elf64_Rel r;  // r_offset and r_info lead both entry kinds
        std::memcpy(&r, p + at, sizeof(r));
        if (ELF64_R_TYPE(r.r_info) == 0) continue;  // R_*_NONE: the loader skips it
        if (absl::Status s = CheckTarget(r.r_offset, textrel, t.name, at / t.entsize); !s.ok()) {
          return s;
        }
        if (ELF64_R_SYM(r.r_info) != 0) {
          if (absl::Status s = CheckSymbol(ELF64_R_SYM(r.r_info)); !s.ok()) return s;
        }
      }
    }
    return CheckRelr(textrel);
  }

  absl::Status CheckTarget(uint64_t target, bool textrel, const char* table, uint64_t index) const {
    const Load* l = image_.Mapped(target, 8);
    if (l == nullptr || (!l->writable && !textrel)) {
      return Bad(
          absl::StrFormat("relocation %d of %s writes at %#x, outside every %s loadable segment",
                          index, table, target, textrel ? "" : "writable"));
    }
    return absl::OkStatus();
  }

  // DT_RELR: an address entry (even) relocates one word and starts a run; a
  // bitmap entry (odd) relocates the set words among the 63 that follow.
  absl::Status CheckRelr(bool textrel) const {
    if (!dyn_.Has(DT_RELR)) return absl::OkStatus();
    const uint64_t addr = dyn_.Get(DT_RELR), size = dyn_.Get(DT_RELRSZ);
    const char* p = image_.FileBytes(addr, size);
    if (!dyn_.Has(DT_RELRSZ) || size % 8 != 0 || p == nullptr) {
      return Bad(absl::StrFormat(
          "relocation table DT_RELR [%#x, +%d) is not whole words held by a loadable segment's "
          "file bytes",
          addr, size));
    }
    bool started = false;
    uint64_t where = 0;
    for (uint64_t at = 0; at < size; at += 8) {
      uint64_t entry;
      std::memcpy(&entry, p + at, 8);
      if ((entry & 1) == 0) {
        if (absl::Status s = CheckTarget(entry, textrel, "DT_RELR", at / 8); !s.ok()) return s;
        where = entry + 8;
        started = true;
        continue;
      }
      if (!started) return Bad("DT_RELR starts with a bitmap entry instead of an address");
      for (int bit = 1; bit < 64; ++bit) {
        if (((entry >> bit) & 1) == 0) continue;
        const absl::Status s = CheckTarget(where + (bit - 1) * 8, textrel, "DT_RELR", at / 8);
        if (!s.ok()) return s;
      }
      where += 63 * 8;
    }
    return absl::OkStatus();
  }

  // DT_GNU_HASH: [nbuckets, symoffset, bloom words, bloom shift], the bloom
  // filter, the buckets, then one chain word per symbol from symoffset on.
  // The loader divides by nbuckets, masks with bloom words - 1, and walks
  // each chain until a word with its low bit set.
  absl::Status CheckGnuHash() const {
    if (!dyn_.Has(DT_GNU_HASH)) return absl::OkStatus();
    const uint64_t base = dyn_.Get(DT_GNU_HASH);
    uint32_t header[4];
    if (!image_.Read(base, &header)) return OutsideImage("the DT_GNU_HASH header", base);
    const uint32_t nbuckets = header[0], symoffset = header[1], bloom = header[2];
    if (nbuckets == 0 || !PowerOfTwo(bloom)) {
      return Bad(absl::StrFormat(
          "DT_GNU_HASH: nbuckets (%d) must be positive and the bloom size (%d) a power of two",
          nbuckets, bloom));
    }
    const uint64_t buckets = base + 16 + uint64_t{bloom} * 8;
    const char* b = image_.FileBytes(buckets, uint64_t{nbuckets} * 4);
    if (image_.FileBytes(base + 16, uint64_t{bloom} * 8) == nullptr || b == nullptr) {
      return OutsideImage("the DT_GNU_HASH bloom filter or buckets", base + 16);
    }
    const uint64_t chains = buckets + uint64_t{nbuckets} * 4;
    // Chains are disjoint in a real table: more steps than chain words means
    // buckets share a chain, which would make this walk quadratic.
    uint64_t steps = 0;
    for (uint32_t i = 0; i < nbuckets; ++i) {
      uint32_t sym;
      std::memcpy(&sym, b + uint64_t{i} * 4, 4);
      if (sym == 0) continue;
      if (sym < symoffset) {
        return Bad(absl::StrFormat("DT_GNU_HASH: bucket %d names symbol %d, below symoffset (%d)",
                                   i, sym, symoffset));
      }
      for (uint64_t s = sym;; ++s) {
        if (++steps > image_.size() / 4) {
          return Bad("DT_GNU_HASH: buckets share chain words (chains must be disjoint)");
        }
        uint32_t word;
        if (!image_.Read(chains + (s - symoffset) * 4, &word)) {
          return OutsideImage("a DT_GNU_HASH chain", chains + (s - symoffset) * 4);
        }
        if (absl::Status st = CheckSymbol(s); !st.ok()) return st;
        if (word & 1) break;
      }
    }
    return absl::OkStatus();
  }

  // DT_HASH: [nbucket, nchain, buckets, chains]; every entry is a symbol
  // index below nchain, and the loader divides by nbucket.
  absl::Status CheckSysvHash() const {
    if (!dyn_.Has(DT_HASH)) return absl::OkStatus();
    const uint64_t base = dyn_.Get(DT_HASH);
    uint32_t header[2];
    if (!image_.Read(base, &header)) return OutsideImage("the DT_HASH header", base);
    const uint32_t nbucket = header[0], nchain = header[1];
    const uint64_t words = uint64_t{nbucket} + nchain;
    const char* p = image_.FileBytes(base + 8, words * 4);
    if (nbucket == 0 || p == nullptr) {
      return Bad(absl::StrFormat(
          "DT_HASH: nbucket (%d) must be positive and its %d words held by the file image", nbucket,
          words));
    }
    for (uint64_t i = 0; i < words; ++i) {
      uint32_t sym;
      std::memcpy(&sym, p + i * 4, 4);
      if (sym >= nchain) {
        return Bad(absl::StrFormat("DT_HASH: entry %d names symbol %d, not below nchain (%d)", i,
                                   sym, nchain));
      }
    }
    for (uint32_t s = 0; s < nchain; ++s) {
      if (absl::Status st = CheckSymbol(s); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  const Image& image_;
  const Dynamic& dyn_;
  const char* strtab_ = nullptr;
  uint64_t strsz_ = 0;
  uint64_t max_version_ = 0;
};

}  // namespace

absl::Status CheckElfImage(absl::string_view bytes) {
  Elf64_Ehdr eh;
  if (absl::Status s = CheckHeader(bytes, &eh); !s.ok()) return s;
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  std::memcpy(phdrs.data(), bytes.data() + eh.e_phoff, phdrs.size() * sizeof(Elf64_Phdr));

  std::vector<Load> loads;
  int dynamic = -1;
  for (int i = 0; i < eh.e_phnum; ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if (ph.p_type == PT_LOAD) {
      const absl::Status s =
          CheckLoad(ph, i, bytes.size(), loads.empty() ? nullptr : &loads.back());
      if (!s.ok()) return s;
      loads.push_back({ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, (ph.p_flags & PF_W) != 0});
    } else if (ph.p_type == PT_DYNAMIC) {
      if (dynamic >= 0)
        return Bad(absl::StrFormat("segments %d and %d are both PT_DYNAMIC", dynamic, i));
      dynamic = i;
    }
  }
  if (loads.empty()) return Bad("no loadable segment (PT_LOAD)");
  if (dynamic < 0) return Bad("no dynamic segment (PT_DYNAMIC)");

  const Image image(bytes, std::move(loads));
  for (int i = 0; i < eh.e_phnum; ++i) {
    if (absl::Status s = CheckAuxiliary(image, phdrs[i], i); !s.ok()) return s;
  }
  Dynamic dyn(image);
  if (absl::Status s = dyn.Parse(phdrs[dynamic]); !s.ok()) return s;
  return DynamicChecker(image, dyn).Check();
}

}  // namespace attnkit

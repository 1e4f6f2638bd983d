#include "io/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/checked_math.h"
#include "core/status_macros.h"
#include "io/config_io.h"

namespace attnkit {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

absl::Status Bad(absl::string_view source, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": not a usable .npy file: ", why));
}

// Returns the text after `'key':` in the header dict, trimmed.
absl::StatusOr<absl::string_view> HeaderValue(absl::string_view header, absl::string_view key,
                                              absl::string_view source) {
  const std::string quoted = absl::StrCat("'", key, "'");
  const size_t at = header.find(quoted);
  if (at == absl::string_view::npos) {
    return Bad(source, absl::StrCat("header has no ", quoted, " entry"));
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(at + quoted.size()));
  if (!absl::ConsumePrefix(&rest, ":")) return Bad(source, absl::StrCat("no ':' after ", quoted));
  return absl::StripLeadingAsciiWhitespace(rest);
}

// The element type in the file; int64 arrays (NumPy's default integer) load
// as int32, with a range check.
struct FileType {
  DType dtype;
  size_t file_size;
};

absl::StatusOr<FileType> ParseDescr(absl::string_view value, absl::string_view source) {
  if (value.size() < 2 || (value[0] != '\'' && value[0] != '"')) {
    return Bad(source, "'descr' is not a string");
  }
  const size_t end = value.find(value[0], 1);
  if (end == absl::string_view::npos) return Bad(source, "'descr' string is not closed");
  const absl::string_view descr = value.substr(1, end - 1);
  if (descr == "<f4") return FileType{DType::kF32, 4};
  if (descr == "<f2") return FileType{DType::kF16, 2};
  if (descr == "<i4") return FileType{DType::kI32, 4};
  if (descr == "<i8") return FileType{DType::kI32, 8};
  if (descr == "<f8") return FileType{DType::kF32, 8};
  if (descr == "|u1" || descr == "|b1" || descr == "<u1" || descr == "<b1") {
    return FileType{DType::kU8, 1};
  }
  if (!descr.empty() && descr[0] == '>') {
    return Bad(source, absl::StrCat("dtype '", descr,
                                    "' is big-endian; only little-endian data is accepted"));
  }
  return Bad(source, absl::StrCat("dtype '", descr,
                                  "' is not supported; use float32 (<f4), float16 (<f2), "
                                  "float64 (<f8), int32 (<i4), int64 (<i8), uint8 or bool"));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view value, absl::string_view source) {
  if (!absl::ConsumePrefix(&value, "(")) return Bad(source, "'shape' is not a tuple");
  const size_t close = value.find(')');
  if (close == absl::string_view::npos) return Bad(source, "'shape' tuple is not closed");
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(value.substr(0, close), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;  // "(3,)" has a trailing comma
    int64_t dim;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) {
      return Bad(source, absl::StrCat("shape entry '", part, "' is not a size"));
    }
    shape.push_back(dim);
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return Bad(source,
               absl::StrFormat("rank %d is more than the supported %d", shape.size(), kMaxRank));
  }
  return shape;
}

// What the header says: everything but the body.
struct NpyHeader {
  std::vector<int64_t> shape;
  FileType file_type;
  int64_t elements = 0;
  size_t body_start = 0;
  int64_t body_bytes = 0;  // <= max_bytes
};

// Parses the magic, version and header dict from the start of a file
// (`bytes` may stop anywhere after the header) and checks the body size
// against `max_bytes` before anything is allocated or read.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, absl::string_view source,
                                         int64_t max_bytes) {
  if (bytes.size() < kMagicLen + 4 ||
      bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return Bad(source, "missing the \\x93NUMPY magic");
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(source, "truncated header");
    header_len = 0;
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    header_start = 12;
  } else {
    return Bad(source, absl::StrFormat("format version %d is not supported", major));
  }
  if (header_len > bytes.size() - header_start) return Bad(source, "truncated header");
  const absl::string_view header = bytes.substr(header_start, header_len);

  ATTNKIT_ASSIGN_OR_RETURN(absl::string_view descr, HeaderValue(header, "descr", source));
  ATTNKIT_ASSIGN_OR_RETURN(const FileType file_type, ParseDescr(descr, source));
  ATTNKIT_ASSIGN_OR_RETURN(absl::string_view fortran, HeaderValue(header, "fortran_order", source));
  if (absl::StartsWith(fortran, "True")) {
    return Bad(source, "Fortran-order arrays are not supported; save with C order");
  }
  if (!absl::StartsWith(fortran, "False")) return Bad(source, "'fortran_order' is not a bool");
  ATTNKIT_ASSIGN_OR_RETURN(absl::string_view shape_text, HeaderValue(header, "shape", source));
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseShape(shape_text, source));

  int64_t elements = 1;
  for (int64_t d : shape) {
    auto product = CheckedMul(elements, d, "array size");
    if (!product.ok()) return Bad(source, product.status().message());
    elements = *product;
  }
  auto body_bytes = CheckedMul(elements, static_cast<int64_t>(file_type.file_size), "array bytes");
  if (!body_bytes.ok() || *body_bytes > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: shape (%s) needs more than the %d-byte limit for one array", source,
                        absl::StrJoin(shape, ", "), max_bytes));
  }
  NpyHeader h;
  h.shape = std::move(shape);
  h.file_type = file_type;
  h.elements = elements;
  h.body_start = header_start + header_len;
  h.body_bytes = *body_bytes;
  return h;
}

// Bytes enough for any header: magic, version, a 4-byte length and the
// largest header NumPy writes (it caps version 1 headers at 64 KiB).
constexpr size_t kMaxHeaderRead = 12 + (size_t{1} << 20);

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view source,
                                  int64_t max_bytes) {
  ATTNKIT_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes, source, max_bytes));
  const std::vector<int64_t>& shape = h.shape;
  const FileType file_type = h.file_type;
  const DType dtype = file_type.dtype;
  const int64_t elements = h.elements;
  const int64_t body_bytes = h.body_bytes;
  const size_t body_start = h.body_start;
  const size_t have = bytes.size() - body_start;
  if (have != static_cast<size_t>(body_bytes)) {
    return Bad(source, absl::StrFormat("body has %d bytes; shape (%s) of %s needs %d%s", have,
                                       absl::StrJoin(shape, ", "), DTypeName(dtype), body_bytes,
                                       have < size_t(body_bytes) ? " (truncated)" : ""));
  }
  NpyArray out;
  out.shape = shape;
  ATTNKIT_ASSIGN_OR_RETURN(out.tensor, Tensor::Contiguous(dtype, shape));
  if (file_type.file_size == DTypeSize(dtype)) {
    if (have > 0) std::memcpy(out.tensor.data(), bytes.data() + body_start, have);
    return out;
  }
  if (dtype == DType::kF32) {  // float64 in the file
    out.converted_from = "float64";
    auto* dst = static_cast<float*>(out.tensor.data());
    for (int64_t i = 0; i < elements; ++i) {
      double x;
      std::memcpy(&x, bytes.data() + body_start + i * 8, 8);
      dst[i] = static_cast<float>(x);
    }
    return out;
  }
  out.converted_from = "int64";
  auto* dst = static_cast<int32_t*>(out.tensor.data());
  for (int64_t i = 0; i < elements; ++i) {
    int64_t x;
    std::memcpy(&x, bytes.data() + body_start + i * 8, 8);
    if (x < INT32_MIN || x > INT32_MAX) {
      return Bad(source, absl::StrFormat("int64 element %d (%d) does not fit in int32", i, x));
    }
    dst[i] = static_cast<int32_t>(x);
  }
  return out;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path, int64_t max_bytes) {
  // The header first: a shape over max_bytes, or a body that the file's size
  // contradicts, is refused before the body is read.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return ReadFile(path).status();  // the error naming path and reason
  const int64_t file_size = static_cast<int64_t>(in.tellg());
  std::string prefix(static_cast<size_t>(std::min<int64_t>(file_size, kMaxHeaderRead)), '\0');
  in.seekg(0);
  in.read(&prefix[0], static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  ATTNKIT_ASSIGN_OR_RETURN(const NpyHeader h, ParseNpyHeader(prefix, path, max_bytes));
  const int64_t have = file_size - static_cast<int64_t>(h.body_start);
  if (have != h.body_bytes) {
    return Bad(path, absl::StrFormat("body has %d bytes; shape (%s) needs %d%s", have,
                                     absl::StrJoin(h.shape, ", "), h.body_bytes,
                                     have < h.body_bytes ? " (truncated)" : ""));
  }
  ATTNKIT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseNpy(bytes, path, max_bytes);
}

absl::StatusOr<std::string> SerializeNpy(const TensorView& t) {
  const DType out_type = t.dtype == DType::kBF16 ? DType::kF32 : t.dtype;
  const char* descr = out_type == DType::kF32   ? "<f4"
                      : out_type == DType::kF16 ? "<f2"
                      : out_type == DType::kI32 ? "<i4"
                                                : "|u1";
  std::string shape = absl::StrJoin(t.shape.begin(), t.shape.begin() + t.rank, ", ");
  if (t.rank == 1) shape += ",";
  std::string header =
      absl::StrFormat("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  // Pad with spaces so the body starts on a 64-byte boundary; end with '\n'.
  const size_t unpadded = kMagicLen + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) return absl::InvalidArgumentError("npy header too long");

  std::string out(kMagic, kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  const size_t elem = DTypeSize(out_type);
  const size_t body_start = out.size();
  out.resize(body_start + static_cast<size_t>(t.NumElements()) * elem);
  char* dst = &out[body_start];
  const size_t in_elem = DTypeSize(t.dtype);
  ForEachOffset(t, [&](int64_t off) {
    if (t.dtype == DType::kBF16) {
      const float f = t.LoadF32(off);
      std::memcpy(dst, &f, 4);
    } else {
      std::memcpy(dst, static_cast<const char*>(t.data) + off * in_elem, elem);
    }
    dst += elem;
  });
  return out;
}

absl::Status WriteNpy(const std::string& path, const TensorView& t) {
  ATTNKIT_ASSIGN_OR_RETURN(std::string bytes, SerializeNpy(t));
  return WriteFileAtomically(path, bytes);
}

}  // namespace attnkit

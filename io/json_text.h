// The two lexical pieces every JSON writer here needs, in one place: a
// quoted, escaped string and a number that reads back as the same value
// (non-finite values as proto3 JSON's strings).
#ifndef ATTNKIT_IO_JSON_TEXT_H_
#define ATTNKIT_IO_JSON_TEXT_H_

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"

namespace attnkit {

// `s` quoted, with '"', '\' and control characters escaped; UTF-8 passes
// through.
inline void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// The shortest of `short_digits` or `long_digits` significant digits that
// reads back as v (as protobuf's SimpleDtoa does: 0.1 prints as 0.1); NaN
// and infinities as "NaN", "Infinity", "-Infinity". T is float (6, 9) or
// double (15, 17).
template <typename T>
void AppendJsonNumber(T v, std::string* out, int short_digits = 15, int long_digits = 17) {
  if (std::isnan(v)) {
    out->append("\"NaN\"");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    return;
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", short_digits, static_cast<double>(v));
  if (static_cast<T>(std::strtod(buf, nullptr)) != v) {
    std::snprintf(buf, sizeof(buf), "%.*g", long_digits, static_cast<double>(v));
  }
  out->append(buf);
}

}  // namespace attnkit

#endif  // ATTNKIT_IO_JSON_TEXT_H_

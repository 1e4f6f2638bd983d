// Fitting report tables into a terminal: cells shortened with "..." so that
// default tables stay within 120 columns (--wide prints them whole).
#ifndef ATTNKIT_HARNESS_TEXT_FIT_H_
#define ATTNKIT_HARNESS_TEXT_FIT_H_

#include <cstddef>
#include <string>

namespace attnkit {

inline constexpr size_t kTerminalColumns = 120;

// `s` when it has at most `width` characters, else its first width - 3 and
// "..." (width < 4: the first `width`).
inline std::string FitWidth(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width < 4) return s.substr(0, width);
  return s.substr(0, width - 3) + "...";
}

// `text` broken at spaces into lines of at most `width` characters (a word
// longer than that stands alone), each line after the first starting with
// `indent`; every line ends in '\n'.
inline std::string WrapWords(const std::string& text, size_t width,
                             const std::string& indent = "  ") {
  std::string out, line;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    if (!line.empty() && line != indent) line += ' ';
    line += word;
    start = end + 1;
  }
  if (!line.empty()) out += line + "\n";
  return out;
}

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_TEXT_FIT_H_

#include "tools/cli/bare_json_flag.h"

namespace attnkit {

void ExpandBareJsonFlag(std::vector<char*>* args,
                        const std::function<bool(const std::string&)>& is_command) {
  static char kJsonToStdout[] = "--json=-";
  std::vector<char*>& a = *args;
  for (size_t i = 1; i < a.size() && a[i] != nullptr; ++i) {
    const std::string arg = a[i];
    if (arg == "--") break;  // what follows is positional
    if (arg != "--json" && arg != "-json") continue;
    const bool last = i + 1 >= a.size() || a[i + 1] == nullptr;
    const std::string next = last ? "" : a[i + 1];
    if (last || next.empty() || next[0] == '-' || is_command(next)) a[i] = kJsonToStdout;
  }
}

}  // namespace attnkit

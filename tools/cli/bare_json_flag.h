// `--json` with no value means "to standard output", as in gh and cargo:
// Abseil would take the next argument as its value, or fail with "Missing
// the value for the flag 'json'" at the end of the line.
#ifndef ATTNKIT_TOOLS_CLI_BARE_JSON_FLAG_H_
#define ATTNKIT_TOOLS_CLI_BARE_JSON_FLAG_H_

#include <functional>
#include <string>
#include <vector>

namespace attnkit {

// Rewrites each bare --json (or -json) in args (argv[0] first, a trailing
// nullptr allowed) to --json=- when nothing follows it, or what follows is a
// flag, "--", or a command name (is_command). `--json FILE` and `--json=F`
// are left as they are.
void ExpandBareJsonFlag(std::vector<char*>* args,
                        const std::function<bool(const std::string&)>& is_command);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_BARE_JSON_FLAG_H_

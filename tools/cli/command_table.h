// The commands of the attnkit CLI as data: what each does, which flags it
// reads (required ones first), their defaults and an example. `attnkit help
// COMMAND`, `attnkit COMMAND --help` and the overview are printed from it,
// and a flag a command does not read is refused by it, so the help and the
// behaviour cannot drift apart.
#ifndef ATTNKIT_TOOLS_CLI_COMMAND_TABLE_H_
#define ATTNKIT_TOOLS_CLI_COMMAND_TABLE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace attnkit {

struct CommandSpec {
  std::string name;
  std::string summary;                // one line
  std::vector<std::string> required;  // flags without which it fails
  std::vector<std::string> optional;  // flags it reads besides
  std::vector<std::string> examples;  // command lines, "attnkit ..." each
  // What an unset flag means for this command, where the flag's own default
  // does not say it ({"config", "the shapes come from the arrays"}).
  std::vector<std::pair<std::string, std::string>> defaults = {};
};

const std::vector<CommandSpec>& Commands();
// nullptr for an unknown name.
const CommandSpec* FindCommand(const std::string& name);

// Every command with its synopsis (required flags bare, optional ones in
// brackets); the usage `attnkit` and `attnkit --help` print.
std::string Overview();
// One command: summary, usage, each flag with its help and default (from the
// flag registry of the binary), the --config.* flags (from the config's
// descriptor) for a command that reads --config, examples.
std::string CommandHelp(const CommandSpec& command);

// InvalidArgument naming the first flag in `given` (names without dashes)
// that `command` does not read, with the flags it does read. "config.FIELD"
// names pass for a command that reads --config (ApplyConfigFlags checks them).
absl::Status CheckFlagsForCommand(const CommandSpec& command,
                                  const std::vector<std::string>& given);

// The names of the flags on a command line (argv[1..]): "--name", "--name=v"
// and "--noname" (for a boolean flag "name") give "name"; "--" ends flags.
std::vector<std::string> FlagNamesOnCommandLine(int argc, char** argv);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_COMMAND_TABLE_H_

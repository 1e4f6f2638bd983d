// --config.FIELD=VALUE flags: every field of the config message, nested ones
// by dotted path (--config.mask.kind=CAUSAL), read off the message's
// descriptor, so a field added to core/config.proto is a flag with no CLI
// change. They are taken out of argv before Abseil parses the rest.
#ifndef ATTNKIT_TOOLS_CLI_CONFIG_FLAGS_H_
#define ATTNKIT_TOOLS_CLI_CONFIG_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace attnkit {

// One --config.PATH[=VALUE] of a command line.
struct ConfigFlag {
  std::string path;        // field names from the config message down: "mask.kind"
  std::string value;       // as typed
  bool has_value = false;  // false for a bare --config.PATH (true, for a bool)

  std::string Text() const;  // "--config.mask.kind=CAUSAL", as errors quote it
};

// A command line split into its --config.* flags (also -config.*, before a
// "--"), in order, and every other argument, in order.
struct SplitArgs {
  std::vector<ConfigFlag> config_flags;
  std::vector<char*> rest;  // argv[0] and the other arguments, then a nullptr
  int rest_argc() const { return static_cast<int>(rest.size()) - 1; }
};
SplitArgs SplitConfigFlags(int argc, char** argv);

// Sets the field of `message` each flag names, in order (a later flag wins).
// Values: integers in decimal, floats as strtod reads them, enums by value
// name in any case, bools true/false/1/0 (a bare flag: true), strings as
// typed; a repeated field takes a comma-separated list that replaces it, and
// an empty value clears a field (or a whole message). InvalidArgument naming
// the flag, its value and the rule; for an unknown field also close names
// and, when `command` is not empty, "attnkit help COMMAND".
absl::Status ApplyConfigFlags(const std::vector<ConfigFlag>& flags, absl::string_view command,
                              google::protobuf::Message* message);

// One flag per field that takes a value (scalars, enums and repeated ones,
// and the fields of message fields, recursively), in declaration order;
// repeated message fields have none (they are set in the --config file).
struct ConfigFlagDoc {
  std::string path;   // "mask.kind"
  std::string usage;  // "--config.mask.kind=KIND_UNSPECIFIED|NONE|CAUSAL|SLIDING_WINDOW"
};
std::vector<ConfigFlagDoc> ConfigFlagDocs(const google::protobuf::Descriptor& descriptor);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_CONFIG_FLAGS_H_

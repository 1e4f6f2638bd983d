#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "tools/cli/commands.h"

namespace attnkit {

absl::Status BackendsCommand(const BackendRegistry& registry, std::ostream& out) {
  for (Backend* b : registry.All()) {
    const absl::Status available = b->Available();
    out << b->Name() << ": "
        << (available.ok() ? std::string("available")
                           : absl::StrCat("unavailable: ", available.message()))
        << "\n  " << b->Description() << "\n  from: " << registry.Origin(b->Name()) << "\n  "
        << absl::StrReplaceAll(absl::StripSuffix(b->Caps().Describe(), "\n"), {{"\n", "\n  "}});
    out << "\n";
  }
  for (const PluginFailure& f : registry.plugin_failures()) {
    out << "plugin failed: " << f.status.message() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace attnkit

// The backend registry: built-in backends registered from an explicit list,
// plus shared-library backends loaded with dlopen. Safe to use from several
// threads; backends live as long as the registry.
#ifndef ATTNKIT_PLUGIN_REGISTRY_H_
#define ATTNKIT_PLUGIN_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"

namespace attnkit {

// The environment variable holding plugin paths, separated by ':'.
constexpr char kPluginPathEnv[] = "ATTNKIT_PLUGIN_PATH";

struct PluginFailure {
  std::string path;
  absl::Status status;
};

// The outcome of resolving a backend name (or "auto") for a problem.
struct Selection {
  Backend* backend = nullptr;
  std::string reason;  // why this backend, in one line
};

// What a selection asks of a backend, and how its messages name the task.
// The default is the forward pass: Backend::Supports(p).
struct SelectionCheck {
  // OK when the backend can take the task; empty = Supports(p).
  std::function<absl::Status(const Backend&)> accepts;
  // "backend 'X' cannot run <task>: why"; "no registered backend supports
  // <task>: ...".
  std::string task = "this problem";
  // "auto: X is the first backend in the order [...] <chosen>".
  std::string chosen = "that supports this problem";
};

class BackendRegistry {
 public:
  BackendRegistry() = default;
  BackendRegistry(const BackendRegistry&) = delete;
  BackendRegistry& operator=(const BackendRegistry&) = delete;
  ~BackendRegistry();

  // AlreadyExists when a backend of the same name is registered. `origin`
  // says where it came from, for `attnkit backends`.
  absl::Status Register(std::unique_ptr<Backend> backend, const std::string& origin = "linked in");
  // Loads every backend of the plugin at `path`. On failure the error names
  // the file and the reason; it is also kept for plugin_failures().
  absl::Status LoadPlugin(const std::string& path);
  // Loads each path of a ':'-separated list; failures are recorded, not fatal.
  void LoadPluginList(const std::string& paths);

  // NotFound listing the known names when `name` is not registered.
  absl::StatusOr<Backend*> Find(const std::string& name) const;
  std::vector<Backend*> All() const;
  // The named backends in order, or All() when `names` is empty.
  absl::StatusOr<std::vector<Backend*>> FindAll(const std::vector<std::string>& names) const;
  std::vector<std::string> Names() const;
  std::vector<PluginFailure> plugin_failures() const;
  // Where backend `name` came from: "linked in", or the plugin file; empty
  // for an unknown name.
  std::string Origin(const std::string& name) const;

  // Resolves a backend name for `p`: a name must exist and pass `check`
  // (default: support p); "auto" takes the first backend in `auto_order`
  // (then any other registered one) that passes it and, when
  // `host_memory_only`, reads host memory (the caller's tensors are host
  // memory, which a device backend would fault on).
  absl::StatusOr<Selection> Select(const std::string& name, const AttentionProblem& p,
                                   const std::vector<std::string>& auto_order,
                                   bool host_memory_only = false,
                                   const SelectionCheck& check = SelectionCheck()) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Backend>> backends_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> origins_ ABSL_GUARDED_BY(mu_);  // one per backend
  std::vector<PluginFailure> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> handles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attnkit

#endif  // ATTNKIT_PLUGIN_REGISTRY_H_

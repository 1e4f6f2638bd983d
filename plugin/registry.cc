#include "plugin/registry.h"

#include <dlfcn.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "attnkit/plugin.h"
#include "core/status_macros.h"
#include "plugin/plugin_file.h"
#include "plugin/plugin_table_backend.h"

namespace attnkit {

BackendRegistry::~BackendRegistry() {
  absl::MutexLock lock(&mu_);
  // Destroy plugin backends before anything else; the libraries stay mapped
  // (dlclose could unmap code that static destructors still need).
  backends_.clear();
}

absl::Status BackendRegistry::Register(std::unique_ptr<Backend> backend,
                                       const std::string& origin) {
  if (backend == nullptr) return absl::InvalidArgumentError("cannot register a null backend");
  absl::MutexLock lock(&mu_);
  const std::string name = backend->Name();
  for (const auto& b : backends_) {
    if (b->Name() == name) {
      return absl::AlreadyExistsError(
          absl::StrFormat("a backend named '%s' is already registered", name));
    }
  }
  backends_.push_back(std::move(backend));
  origins_.push_back(origin);
  return absl::OkStatus();
}

absl::Status BackendRegistry::LoadPlugin(const std::string& path) {
  auto fail = [&](absl::Status status) {
    absl::MutexLock lock(&mu_);
    failures_.push_back({path, status});
    return status;
  };
  // dlopen faults on some malformed files instead of failing: check first.
  const absl::Status file_ok = CheckPluginFile(path);
  if (!file_ok.ok()) return fail(file_ok);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return fail(absl::NotFoundError(absl::StrFormat(
        "plugin %s: cannot load: %s", path, err != nullptr ? err : "unknown dlopen error")));
  }
  // Until a backend is registered nothing refers to the library: close it on
  // every failure below.
  auto fail_and_close = [&](absl::Status status) {
    dlclose(handle);
    return fail(std::move(status));
  };
  auto entry =
      reinterpret_cast<attnkit_plugin_entry_fn>(dlsym(handle, ATTNKIT_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    return fail_and_close(absl::InvalidArgumentError(
        absl::StrFormat("plugin %s: not an attnkit plugin: symbol %s is missing", path,
                        ATTNKIT_PLUGIN_ENTRY_SYMBOL)));
  }
  const attnkit_plugin* plugin = entry();
  const absl::Status table_ok = CheckPluginTable(plugin, path);
  if (!table_ok.ok()) return fail_and_close(table_ok);
  std::vector<std::unique_ptr<Backend>> created;
  for (uint32_t i = 0; i < plugin->num_backends; ++i) {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreatePluginBackend(*plugin, i, path);
    if (!b.ok()) {
      created.clear();  // their code lives in the library
      return fail_and_close(b.status());
    }
    created.push_back(std::move(*b));
  }
  {
    absl::MutexLock lock(&mu_);
    handles_.push_back(handle);
  }
  for (auto& b : created) {
    const absl::Status s = Register(std::move(b), path);
    if (!s.ok())
      return fail(absl::Status(s.code(), absl::StrCat("plugin ", path, ": ", s.message())));
  }
  return absl::OkStatus();
}

void BackendRegistry::LoadPluginList(const std::string& paths) {
  for (absl::string_view path : absl::StrSplit(paths, ':', absl::SkipEmpty())) {
    LoadPlugin(std::string(path)).IgnoreError();  // recorded in failures_
  }
}

std::string BackendRegistry::Origin(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i]->Name() == name) return origins_[i];
  }
  return "";
}

absl::StatusOr<Backend*> BackendRegistry::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& b : backends_) {
    if (b->Name() == name) return b.get();
    names.push_back(b->Name());
  }
  return absl::NotFoundError(
      absl::StrFormat("unknown backend '%s'; registered: %s", name, absl::StrJoin(names, ", ")));
}

std::vector<Backend*> BackendRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

absl::StatusOr<std::vector<Backend*>> BackendRegistry::FindAll(
    const std::vector<std::string>& names) const {
  if (names.empty()) return All();
  std::vector<Backend*> out;
  for (const std::string& name : names) {
    ATTNKIT_ASSIGN_OR_RETURN(Backend * b, Find(name));
    out.push_back(b);
  }
  return out;
}

std::vector<std::string> BackendRegistry::Names() const {
  std::vector<std::string> out;
  for (Backend* b : All()) out.push_back(b->Name());
  return out;
}

std::vector<PluginFailure> BackendRegistry::plugin_failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

absl::StatusOr<Selection> BackendRegistry::Select(const std::string& name,
                                                  const AttentionProblem& p,
                                                  const std::vector<std::string>& auto_order,
                                                  bool host_memory_only,
                                                  const SelectionCheck& check) const {
  const auto accepts = [&](const Backend& b) {
    return check.accepts ? check.accepts(b) : b.Supports(p);
  };
  if (name != "auto" && !name.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(Backend * b, Find(name));
    const absl::Status s = accepts(*b);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("backend '%s' cannot run %s: %s", name,
                                                    check.task, s.message()));
    }
    return Selection{b, absl::StrFormat("%s: chosen by name", name)};
  }
  // auto: the static order first, then any other registered backend.
  std::vector<Backend*> candidates;
  for (const std::string& n : auto_order) {
    auto b = Find(n);
    if (b.ok()) candidates.push_back(*b);
  }
  for (Backend* b : All()) {
    if (std::find(candidates.begin(), candidates.end(), b) == candidates.end()) {
      candidates.push_back(b);
    }
  }
  if (host_memory_only) {
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [](Backend* b) { return !b->UsesHostMemory(); }),
                     candidates.end());
  }
  std::vector<std::string> passed_over;
  for (Backend* b : candidates) {
    const absl::Status s = accepts(*b);
    if (s.ok()) {
      std::string reason =
          absl::StrFormat("auto: %s is the first backend in the order [%s] %s", b->Name(),
                          absl::StrJoin(auto_order, ", "), check.chosen);
      if (!passed_over.empty()) {
        absl::StrAppend(&reason, " (passed over: ", absl::StrJoin(passed_over, "; "), ")");
      }
      return Selection{b, reason};
    }
    passed_over.push_back(absl::StrCat(b->Name(), ": ", s.message()));
  }
  return absl::UnimplementedError(
      absl::StrCat("no registered ", host_memory_only ? "host-memory " : "", "backend supports ",
                   check.task, ": ", absl::StrJoin(passed_over, "; ")));
}

}  // namespace attnkit

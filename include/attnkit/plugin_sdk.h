// Writing an attnkit backend plugin in C++: derive from attnkit_sdk::PluginBackend,
// then export it with one macro. Header-only; it needs nothing but the C ABI
// (include/attnkit/plugin.h) and the C++17 standard library, so a plugin may be
// built with any compiler and standard library (clang with libc++, say) and
// link its own Abseil or none.
//
//   class MyBackend : public attnkit_sdk::PluginBackend {
//    public:
//     const char* Name() override { return "my-backend"; }
//     const char* Description() override { return "what it runs"; }
//     void Capabilities(attnkit_caps* caps) override { caps->dtypes = 1u << ATTNKIT_F32; ... }
//     attnkit_sdk::Status Forward(const attnkit_problem& p, const attnkit_args& args,
//                                 attnkit_run_info* info) override { ... }
//   };
//   std::unique_ptr<attnkit_sdk::PluginBackend> CreateMy(uint32_t index) {
//     return std::make_unique<MyBackend>();
//   }
//   ATTNKIT_EXPORT_PLUGIN("my-plugin", 1, CreateMy)
//
// Build it as a shared object with hidden visibility (-fvisibility=hidden);
// only attnkit_plugin_entry, which the macro marks visible, is exported.
// The SDK turns every call into the C table's form: problem and args copied
// to this build's struct sizes (fields an older host does not send are
// zero), capabilities and run info written only as far as the host's
// struct_size reaches, Status to code + message, exceptions to INTERNAL.
#ifndef ATTNKIT_ATTNKIT_PLUGIN_SDK_H_
#define ATTNKIT_ATTNKIT_PLUGIN_SDK_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "attnkit/plugin.h"

namespace attnkit_sdk {

// A status code (ATTNKIT_OK, ATTNKIT_INVALID_ARGUMENT, ...) and its message.
struct Status {
  int32_t code = ATTNKIT_OK;
  std::string message;

  bool ok() const { return code == ATTNKIT_OK; }
  static Status Error(int32_t code, std::string message) {
    return Status{code, std::move(message)};
  }
};

class PluginBackend {
 public:
  virtual ~PluginBackend() = default;

  // Strings owned by the backend, valid while it lives.
  virtual const char* Name() = 0;
  virtual const char* Description() = 0;
  // Fills `caps`, which arrives zeroed (struct_size set).
  virtual void Capabilities(attnkit_caps* caps) = 0;
  // Computes o (and lse). The host has validated args against p and checked
  // Capabilities and Supports. `info` arrives zeroed, workspace_allocations
  // -1.
  virtual Status Forward(const attnkit_problem& p, const attnkit_args& args,
                         attnkit_run_info* info) = 0;

  virtual Status Available() { return Status{}; }
  virtual Status Supports(const attnkit_problem& p) {
    (void)p;
    return Status{};
  }

  // Memory: host memory unless overridden. A device backend returns false
  // and overrides Allocate, FreeBuffer, Upload and Download.
  // The backward pass: a backend that has one reports bwd_supported in its
  // capabilities and overrides Backward (and SupportsBackward for more).
  virtual Status SupportsBackward(const attnkit_problem& p) {
    (void)p;
    return Status{};
  }
  virtual Status Backward(const attnkit_problem& p, const attnkit_args& args,
                          const attnkit_grads& grads, attnkit_run_info* info) {
    (void)p;
    (void)args;
    (void)grads;
    (void)info;
    return Status::Error(ATTNKIT_UNIMPLEMENTED, std::string(Name()) + " has no backward pass");
  }

  virtual bool UsesHostMemory() { return true; }
  virtual Status Allocate(size_t bytes, void** data) {
    (void)bytes;
    *data = nullptr;
    return Status::Error(ATTNKIT_UNIMPLEMENTED, std::string(Name()) + " uses host memory");
  }
  virtual void FreeBuffer(void* data) { (void)data; }
  virtual Status Upload(void* dst, const void* host, size_t bytes) {
    std::memcpy(dst, host, bytes);
    return Status{};
  }
  virtual Status Download(const void* src, void* host, size_t bytes) {
    std::memcpy(host, src, bytes);
    return Status{};
  }
  virtual Status Synchronize() { return Status{}; }

  virtual Status SetNumThreads(int n) {
    (void)n;
    return Status{};
  }
  virtual int NumThreads() { return 1; }
  virtual Status SetStream(void* stream) {
    (void)stream;
    return Status::Error(ATTNKIT_UNIMPLEMENTED,
                         std::string(Name()) + " runs on the host; it has no stream to set");
  }
};

// The function that creates backend `index` of a plugin (nullptr for an
// index it does not have).
using Factory = std::unique_ptr<PluginBackend> (*)(uint32_t index);

namespace internal {

// Copies `message` into err[err_size] NUL-terminated, truncated to fit.
inline void CopyCString(const std::string& message, char* err, size_t err_size) {
  if (err == nullptr || err_size == 0) return;
  const size_t n = std::min(message.size(), err_size - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

// Runs fn (returning Status) with no exception escaping.
template <class Fn>
int32_t Guard(char* err, size_t err_size, Fn&& fn) {
  try {
    const Status s = fn();
    if (!s.ok()) CopyCString(s.message, err, err_size);
    return s.code;
  } catch (const std::exception& e) {
    CopyCString(std::string("C++ exception: ") + e.what(), err, err_size);
  } catch (...) {
    CopyCString("unknown C++ exception", err, err_size);
  }
  return ATTNKIT_INTERNAL;
}

// `in`, whose struct_size may be smaller (an older host) or larger (a newer
// one) than this build's T, as a T: known fields copied, the rest zero.
template <class T>
T CopyIn(const T* in) {
  T out;
  std::memset(&out, 0, sizeof(T));
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Writes `local` into the host's `out` as far as both know it, keeping the
// host's struct_size.
template <class T>
void CopyOut(const T& local, T* out) {
  const uint32_t host_size = out->struct_size;
  std::memcpy(out, &local, std::min<size_t>(host_size, sizeof(T)));
  out->struct_size = host_size;
}

inline PluginBackend* Self(void* self) { return static_cast<PluginBackend*>(self); }

inline void Destroy(void* self) { delete Self(self); }
inline const char* Name(void* self) { return Self(self)->Name(); }
inline const char* Description(void* self) { return Self(self)->Description(); }
inline void Capabilities(void* self, attnkit_caps* caps) {
  attnkit_caps local;
  std::memset(&local, 0, sizeof(local));
  local.struct_size = sizeof(local);
  try {
    Self(self)->Capabilities(&local);
  } catch (...) {
    std::memset(&local, 0, sizeof(local));  // no capabilities: every problem refused
  }
  CopyOut(local, caps);
}
inline int32_t Forward(void* self, const attnkit_problem* p, const attnkit_args* args,
                       attnkit_run_info* info, char* err, size_t err_size) {
  return Guard(err, err_size, [&] {
    const attnkit_problem problem = CopyIn(p);
    const attnkit_args a = CopyIn(args);
    attnkit_run_info local;
    std::memset(&local, 0, sizeof(local));
    local.struct_size = sizeof(local);
    local.workspace_allocations = -1;
    Status s = Self(self)->Forward(problem, a, &local);
    local.kernel[sizeof(local.kernel) - 1] = '\0';
    if (info != nullptr) CopyOut(local, info);
    return s;
  });
}
inline int32_t SupportsBackward(void* self, const attnkit_problem* p, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->SupportsBackward(CopyIn(p)); });
}
inline int32_t Backward(void* self, const attnkit_problem* p, const attnkit_args* args,
                        const attnkit_grads* grads, attnkit_run_info* info, char* err,
                        size_t err_size) {
  return Guard(err, err_size, [&] {
    const attnkit_problem problem = CopyIn(p);
    const attnkit_args a = CopyIn(args);
    const attnkit_grads g = CopyIn(grads);
    attnkit_run_info local;
    std::memset(&local, 0, sizeof(local));
    local.struct_size = sizeof(local);
    local.workspace_allocations = -1;
    Status s = Self(self)->Backward(problem, a, g, &local);
    local.kernel[sizeof(local.kernel) - 1] = '\0';
    if (info != nullptr) CopyOut(local, info);
    return s;
  });
}
inline int32_t Available(void* self, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Available(); });
}
inline int32_t Supports(void* self, const attnkit_problem* p, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Supports(CopyIn(p)); });
}
inline int32_t UsesHostMemory(void* self) {
  try {
    return Self(self)->UsesHostMemory() ? 1 : 0;
  } catch (...) {
    return 1;
  }
}
inline int32_t Allocate(void* self, size_t bytes, void** data, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Allocate(bytes, data); });
}
inline void FreeBuffer(void* self, void* data) {
  try {
    Self(self)->FreeBuffer(data);
  } catch (...) {
  }
}
inline int32_t Upload(void* self, void* dst, const void* host, size_t bytes, char* err,
                      size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Upload(dst, host, bytes); });
}
inline int32_t Download(void* self, const void* src, void* host, size_t bytes, char* err,
                        size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Download(src, host, bytes); });
}
inline int32_t Synchronize(void* self, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->Synchronize(); });
}
inline int32_t SetNumThreads(void* self, int32_t n, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->SetNumThreads(n); });
}
inline int32_t NumThreads(void* self) {
  try {
    return Self(self)->NumThreads();
  } catch (...) {
    return 1;
  }
}
inline int32_t SetStream(void* self, void* stream, char* err, size_t err_size) {
  return Guard(err, err_size, [&] { return Self(self)->SetStream(stream); });
}

inline const attnkit_backend_ops* Ops() {
  static const attnkit_backend_ops ops = {
      sizeof(attnkit_backend_ops),
      &Destroy,
      &Name,
      &Description,
      &Capabilities,
      &Forward,
      &Available,
      &Supports,
      &UsesHostMemory,
      &Allocate,
      &FreeBuffer,
      &Upload,
      &Download,
      &Synchronize,
      &SetNumThreads,
      &NumThreads,
      &SetStream,
      &SupportsBackward,
      &Backward,
  };
  return &ops;
}

template <Factory kFactory>
int32_t Create(uint32_t index, void** self, const attnkit_backend_ops** ops, char* err,
               size_t err_size) {
  return Guard(err, err_size, [&] {
    std::unique_ptr<PluginBackend> b = kFactory(index);
    if (b == nullptr) {
      return Status::Error(ATTNKIT_NOT_FOUND, "no backend at index " + std::to_string(index));
    }
    *self = b.release();
    *ops = Ops();
    return Status{};
  });
}

}  // namespace internal
}  // namespace attnkit_sdk

// Defines attnkit_plugin_entry for a plugin named `plugin_name` (a string
// literal) with `num_backends` backends made by `factory` (a Factory).
#define ATTNKIT_EXPORT_PLUGIN(plugin_name, num_backends, factory)                               \
  extern "C" __attribute__((visibility("default"))) const attnkit_plugin* attnkit_plugin_entry( \
      void) {                                                                                   \
    static const attnkit_plugin plugin = {sizeof(attnkit_plugin), ATTNKIT_PLUGIN_ABI_VERSION,   \
                                          plugin_name, (num_backends),                          \
                                          &::attnkit_sdk::internal::Create<factory>};           \
    return &plugin;                                                                             \
  }

#endif  // ATTNKIT_ATTNKIT_PLUGIN_SDK_H_

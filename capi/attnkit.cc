// The C API (include/attnkit/attnkit.h) over the registry, the built-in backends and
// `auto` selection. Every entry point catches what C++ could throw and turns
// absl::Status into a code plus message.
#include "attnkit/attnkit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/auto_select.h"
#include "backends/builtin.h"
#include "capi/internal.h"
#include "core/status_macros.h"
#include "platform/version.h"
#include "plugin/c_abi.h"
#include "plugin/registry.h"

namespace {

using attnkit::AttentionArgs;
using attnkit::AttentionProblem;
using attnkit::Backend;
using attnkit::capi::CopyString;
using attnkit::capi::Guard;
using attnkit::capi::RequireContext;
using attnkit::capi::RequireStructSize;

// The problem `p` describes, with scale 0 meaning 1/sqrt(head_dim),
// validated.
absl::StatusOr<AttentionProblem> ProblemOf(const attnkit_problem* p) {
  if (p == nullptr) return absl::InvalidArgumentError("problem is NULL");
  ATTNKIT_RETURN_IF_ERROR(RequireStructSize(
      p->struct_size, offsetof(attnkit_problem, backend) + sizeof(char*), "attnkit_problem"));
  attnkit_problem c;
  std::memset(&c, 0, sizeof(c));
  std::memcpy(&c, p, std::min<size_t>(p->struct_size, sizeof(c)));
  ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem problem, attnkit::ProblemFromC(c));
  if (problem.scale == 0.0f && problem.head_dim > 0) {
    problem.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(problem.head_dim)));
  }
  if (problem.model_dim == 0) problem.model_dim = problem.num_heads * problem.head_dim;
  if (problem.backend.empty()) problem.backend = "auto";
  ATTNKIT_RETURN_IF_ERROR(attnkit::ValidateProblem(problem));
  return problem;
}

// The tensors `args` describes. A caller built before the newest fields
// passes a shorter struct: the fields past its struct_size read as absent.
absl::StatusOr<attnkit::AttentionArgs> ArgsOf(const attnkit_args* args) {
  if (args == nullptr) return absl::InvalidArgumentError("args is NULL");
  ATTNKIT_RETURN_IF_ERROR(RequireStructSize(
      args->struct_size, offsetof(attnkit_args, bias) + sizeof(attnkit_tensor), "attnkit_args"));
  attnkit_args c;
  std::memset(&c, 0, sizeof(c));
  std::memcpy(&c, args, std::min<size_t>(args->struct_size, sizeof(c)));
  return attnkit::ArgsFromC(c);
}

// A run result, when the caller asked for one, must hold every field filled.
absl::Status CheckRunResult(const attnkit_run_result* result) {
  if (result == nullptr) return absl::OkStatus();
  return RequireStructSize(result->struct_size,
                           offsetof(attnkit_run_result, workspace_allocations) + sizeof(int64_t),
                           "attnkit_run_result");
}

void FillRunResult(const attnkit::RunInfo& info, const attnkit::Selection& selection,
                   attnkit_run_result* result) {
  if (result == nullptr) return;
  CopyString(info.backend, result->backend, sizeof(result->backend));
  CopyString(info.kernel, result->kernel, sizeof(result->kernel));
  CopyString(selection.reason, result->reason, sizeof(result->reason));
  result->workspace_allocations = info.workspace_allocations;
}

absl::StatusOr<Backend*> FindBackend(attnkit_context* ctx, const char* name) {
  ATTNKIT_RETURN_IF_ERROR(RequireContext(ctx));
  if (name == nullptr) return absl::InvalidArgumentError("backend name is NULL");
  return ctx->registry.Find(name);
}

// The backend for the backward pass of `p` (SelectBackend with a backward
// check): `name` must support it (SupportsBackward); "auto" takes the first
// host-memory backend of the auto order for p (then any other registered
// one) whose Supports and SupportsBackward accept p (and that writes dbias
// when `wants_dbias`). The reason says which and why.
absl::StatusOr<attnkit::Selection> SelectBackwardBackend(const attnkit::BackendRegistry& registry,
                                                         const std::string& name,
                                                         const AttentionProblem& p,
                                                         bool wants_dbias) {
  attnkit::SelectionCheck check;
  check.accepts = [&p, wants_dbias](const Backend& b) -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(b.Supports(p));
    ATTNKIT_RETURN_IF_ERROR(b.SupportsBackward(p));
    if (wants_dbias && !b.Caps().backward.bias_grad) {
      return absl::UnimplementedError(
          "grads.dbias was given, and its backward does not write dbias (bias_grad)");
    }
    return absl::OkStatus();
  };
  check.task = absl::StrCat("the backward of ", p.Id());
  check.chosen = "whose backward supports this problem";
  return attnkit::SelectBackend(registry, name, p, /*threads=*/0, /*host_memory_only=*/true, check);
}

}  // namespace

extern "C" {

const char* attnkit_version(void) {
  static const std::string text = absl::StrCat(
      "attnkit ", attnkit::AttnkitVersion(), " (commit ", attnkit::AttnkitCommit(), ", c-api ",
      ATTNKIT_C_API_VERSION, ", plugin abi ", ATTNKIT_PLUGIN_ABI_VERSION, ")");
  return text.c_str();
}

int32_t attnkit_context_create(const char* plugin_paths, attnkit_context** out, char* err,
                               size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    auto ctx = std::make_unique<attnkit_context>();
    attnkit::RegisterBuiltinBackends(&ctx->registry);
    if (plugin_paths != nullptr) ctx->registry.LoadPluginList(plugin_paths);
    if (const char* env = std::getenv(attnkit::kPluginPathEnv)) ctx->registry.LoadPluginList(env);
    for (Backend* b : ctx->registry.All()) ctx->caps.push_back(b->Caps());
    *out = ctx.release();
    return absl::OkStatus();
  });
}

void attnkit_context_destroy(attnkit_context* ctx) { delete ctx; }

int32_t attnkit_num_plugin_failures(const attnkit_context* ctx) {
  return ctx == nullptr ? 0 : static_cast<int32_t>(ctx->registry.plugin_failures().size());
}

int32_t attnkit_plugin_failure(const attnkit_context* ctx, int32_t index, char* buf,
                               size_t buf_size) {
  return Guard(buf, buf_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireContext(ctx));
    const std::vector<attnkit::PluginFailure> failures = ctx->registry.plugin_failures();
    if (index < 0 || index >= static_cast<int32_t>(failures.size())) {
      return absl::OutOfRangeError(
          absl::StrFormat("plugin failure index %d is outside [0, %d)", index, failures.size()));
    }
    CopyString(std::string(failures[index].status.message()), buf, buf_size);
    return absl::OkStatus();
  });
}

int32_t attnkit_num_backends(const attnkit_context* ctx) {
  return ctx == nullptr ? 0 : static_cast<int32_t>(ctx->caps.size());
}

int32_t attnkit_backend_info_get(const attnkit_context* ctx, int32_t index,
                                 attnkit_backend_info* info, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireContext(ctx));
    if (info == nullptr) return absl::InvalidArgumentError("info is NULL");
    // A caller built before the newest caps rows passes a shorter struct: it
    // gets the rows it knows (at least those of 0.26, the backward pass's).
    const size_t caps_at = offsetof(attnkit_backend_info, caps);
    ATTNKIT_RETURN_IF_ERROR(RequireStructSize(info->struct_size,
                                              caps_at + offsetof(attnkit_caps, fast_kv_dtypes),
                                              "attnkit_backend_info"));
    const std::vector<Backend*> all = ctx->registry.All();
    if (index < 0 || index >= static_cast<int32_t>(all.size())) {
      return absl::OutOfRangeError(
          absl::StrFormat("backend index %d is outside [0, %d)", index, all.size()));
    }
    Backend* b = all[index];
    CopyString(b->Name(), info->name, sizeof(info->name));
    CopyString(b->Description(), info->description, sizeof(info->description));
    const absl::Status available = b->Available();
    info->available = static_cast<int32_t>(available.code());
    CopyString(std::string(available.message()), info->unavailable_reason,
               sizeof(info->unavailable_reason));
    info->uses_host_memory = b->UsesHostMemory() ? 1 : 0;
    const attnkit_caps caps = attnkit::CapsToC(ctx->caps[index]);
    const size_t caps_bytes =
        std::min(sizeof(attnkit_caps), static_cast<size_t>(info->struct_size) - caps_at);
    std::memcpy(reinterpret_cast<char*>(info) + caps_at, &caps, caps_bytes);
    info->caps.struct_size = static_cast<uint32_t>(caps_bytes);
    return absl::OkStatus();
  });
}

void attnkit_problem_init(attnkit_problem* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  p->dtype = p->kv_dtype = ATTNKIT_F32;
  p->layout = ATTNKIT_LAYOUT_BHTD;
  p->mask = ATTNKIT_MASK_NONE;
  p->alignment = ATTNKIT_ALIGN_BOTTOM_RIGHT;
  p->batch = 1;
  p->memory_budget_bytes = attnkit::kDefaultMemoryBudgetBytes;
  p->name = "";
  p->backend = "auto";
}

int32_t attnkit_problem_validate(const attnkit_problem* p, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() { return ProblemOf(p).status(); });
}

int32_t attnkit_run(attnkit_context* ctx, const char* backend, const attnkit_problem* p,
                    const attnkit_args* args, attnkit_run_result* result, char* err,
                    size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireContext(ctx));
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem problem, ProblemOf(p));
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionArgs a, ArgsOf(args));
    ATTNKIT_RETURN_IF_ERROR(CheckRunResult(result));
    const std::string name = backend != nullptr ? backend : problem.backend;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::Selection selection,
                             attnkit::SelectBackend(ctx->registry, name, problem, /*threads=*/0,
                                                    /*host_memory_only=*/true));
    attnkit::RunInfo info;
    ATTNKIT_RETURN_IF_ERROR(selection.backend->Forward(problem, a, &info));
    ATTNKIT_RETURN_IF_ERROR(selection.backend->Synchronize());
    FillRunResult(info, selection, result);
    return absl::OkStatus();
  });
}

int32_t attnkit_backward(attnkit_context* ctx, const char* backend, const attnkit_problem* p,
                         const attnkit_args* args, const attnkit_grads* grads,
                         attnkit_run_result* result, char* err, size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(RequireContext(ctx));
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem problem, ProblemOf(p));
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionArgs a, ArgsOf(args));
    if (grads == nullptr) return absl::InvalidArgumentError("grads is NULL");
    ATTNKIT_RETURN_IF_ERROR(RequireStructSize(
        grads->struct_size, offsetof(attnkit_grads, dbias) + sizeof(attnkit_tensor),
        "attnkit_grads"));
    ATTNKIT_RETURN_IF_ERROR(CheckRunResult(result));
    // A caller built before dsinks (0.28) passes a shorter struct: the
    // fields past its struct_size are absent, never read.
    attnkit_grads cg;
    std::memset(&cg, 0, sizeof(cg));
    std::memcpy(&cg, grads, std::min<size_t>(grads->struct_size, sizeof(cg)));
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::GradArgs g, attnkit::GradsFromC(cg));
    const std::string name = backend != nullptr ? backend : problem.backend;
    ATTNKIT_ASSIGN_OR_RETURN(const attnkit::Selection selection,
                             SelectBackwardBackend(ctx->registry, name, problem,
                                                   /*wants_dbias=*/!g.dbias.empty()));
    attnkit::RunInfo info;
    ATTNKIT_RETURN_IF_ERROR(selection.backend->Backward(problem, a, g, &info));
    ATTNKIT_RETURN_IF_ERROR(selection.backend->Synchronize());
    FillRunResult(info, selection, result);
    return absl::OkStatus();
  });
}

int32_t attnkit_set_num_threads(attnkit_context* ctx, const char* backend, int32_t n, char* err,
                                size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_ASSIGN_OR_RETURN(Backend * b, FindBackend(ctx, backend));
    if (n < 1) {
      return absl::InvalidArgumentError(absl::StrFormat("threads (%d) must be >= 1", n));
    }
    return b->SetNumThreads(n);
  });
}

int32_t attnkit_set_stream(attnkit_context* ctx, const char* backend, void* stream, char* err,
                           size_t err_size) {
  return Guard(err, err_size, [&]() -> absl::Status {
    ATTNKIT_ASSIGN_OR_RETURN(Backend * b, FindBackend(ctx, backend));
    return b->SetStream(stream);
  });
}

}  // extern "C"

/* attnkit's C API (libattnkit.so): list the backends, run one attention call
 * on caller-owned tensors with a named backend or "auto", and learn what ran
 * and why. It is what the Python package and other languages call.
 *
 * Types. The problem, tensors, capabilities and status codes are those of
 * the plugin ABI (core/attnkit_plugin.h, included here): attnkit_problem
 * carries every field a config can express; attnkit_args holds strided
 * views of q, k, v, o and the optional lse, kv_lengths, blocked_mask and
 * bias. Host backends read host pointers; device backends (cuda) read
 * device pointers (memory from cudaMalloc or a framework's CUDA tensor).
 *
 * Errors. Every fallible function returns ATTNKIT_OK (0) or a status code
 * and writes a NUL-terminated message into `err` (err_size bytes,
 * truncated to fit; err may be NULL). Nothing the library allocates is freed
 * by the caller except through attnkit_context_destroy; no C++ exception
 * crosses this API.
 *
 * Threads. A context may be used from several threads at once: backends
 * serialise what they must. Destroy a context only when no call is running.
 */
#ifndef ATTNKIT_CAPI_ATTNKIT_H_
#define ATTNKIT_CAPI_ATTNKIT_H_

#include <stddef.h>
#include <stdint.h>

#include "core/attnkit_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_C_API_VERSION 1u

typedef struct attnkit_context attnkit_context;

/* The library's version text, e.g. "attnkit (c-api 1, plugin abi 1)". */
const char* attnkit_version(void);

/* sizeof the named struct as this library was compiled ("attnkit_problem",
 * "attnkit_tensor", "attnkit_args", "attnkit_caps", "attnkit_backend_info",
 * "attnkit_run_result"), 0 for another name: bindings in other languages
 * check their mirrors of the structs against it when they load. */
size_t attnkit_struct_size(const char* name);

/* A context holding the built-in backends (highway, blas, reference) and the
 * plugins in `plugin_paths` (':'-separated shared objects; NULL or "" for
 * none) and in $ATTNKIT_PLUGIN_PATH. A plugin that fails to load does not
 * fail the call: attnkit_plugin_failure reports it. */
int32_t attnkit_context_create(const char* plugin_paths, attnkit_context** out, char* err,
                               size_t err_size);
void attnkit_context_destroy(attnkit_context* ctx);

/* Plugins that failed to load: count, and the message of failure `index`
 * ("plugin PATH: reason"), copied into buf. */
int32_t attnkit_num_plugin_failures(const attnkit_context* ctx);
int32_t attnkit_plugin_failure(const attnkit_context* ctx, int32_t index, char* buf,
                               size_t buf_size);

/* One registered backend, as attnkit_backend_info describes it. The caller
 * sets struct_size; strings are copied, truncated to fit. */
typedef struct attnkit_backend_info {
  uint32_t struct_size;
  char name[64];
  char description[512];
  int32_t available; /* ATTNKIT_OK, or why it cannot run here */
  char unavailable_reason[512];
  int32_t uses_host_memory; /* 1: host pointers; 0: device pointers */
  attnkit_caps caps;        /* caps.head_dims points into the context */
} attnkit_backend_info;

int32_t attnkit_num_backends(const attnkit_context* ctx);
int32_t attnkit_backend_info_get(const attnkit_context* ctx, int32_t index,
                                 attnkit_backend_info* info, char* err, size_t err_size);

/* Fills `p` with the defaults of a config that sets nothing: f32, BHTD, no
 * mask, bottom-right alignment, scale 0 (meaning 1/sqrt(head_dim) in
 * attnkit_run), backend "auto", name "" and the default memory budget; the
 * caller then sets the shapes. */
void attnkit_problem_init(attnkit_problem* p);

/* ATTNKIT_OK when `p` is a valid problem; otherwise INVALID_ARGUMENT naming
 * the field, its value and the rule. */
int32_t attnkit_problem_validate(const attnkit_problem* p, char* err, size_t err_size);

/* What one attnkit_run did. The caller sets struct_size. */
typedef struct attnkit_run_result {
  uint32_t struct_size;
  char backend[64];              /* the backend that ran */
  char kernel[256];              /* its kernel, e.g. "flash-tiled/AVX3 q4xk16" */
  char reason[512];              /* why this backend: named, or what auto chose and why */
  int64_t workspace_allocations; /* -1 when the backend does not report it */
} attnkit_run_result;

/* Computes o (and lse) for `p` on backend `backend` (a name, or "auto", or
 * NULL for p->backend) and waits for it to finish. args' tensors are
 * validated against p first (shapes, dtypes, strides, overlap of outputs
 * with inputs). `result` may be NULL. */
int32_t attnkit_run(attnkit_context* ctx, const char* backend, const attnkit_problem* p,
                    const attnkit_args* args, attnkit_run_result* result, char* err,
                    size_t err_size);

/* Worker threads for a backend (CPU backends; others accept and ignore),
 * and the stream a device backend runs on (a cudaStream_t; NULL is CUDA's
 * legacy default stream). */
int32_t attnkit_set_num_threads(attnkit_context* ctx, const char* backend, int32_t n, char* err,
                                size_t err_size);
int32_t attnkit_set_stream(attnkit_context* ctx, const char* backend, void* stream, char* err,
                           size_t err_size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_CAPI_ATTNKIT_H_ */

/* attnkit's C API (libattnkit.so): list the backends, run one attention call
 * on caller-owned tensors with a named backend or "auto", and learn what ran
 * and why. It is what the Python package and other languages call.
 *
 * Types. The problem, tensors, capabilities and status codes are those of
 * the plugin ABI (include/attnkit/plugin.h, included here): attnkit_problem
 * carries every field a config can express; attnkit_args holds strided
 * views of q, k, v, o and the optional lse, kv_lengths, blocked_mask and
 * bias. Host backends read host pointers; device backends (cuda) read
 * device pointers (memory from cudaMalloc or a framework's CUDA tensor).
 *
 * Errors. Every fallible function returns ATTNKIT_OK (0) or a status code
 * and writes a NUL-terminated message into `err` (err_size bytes,
 * truncated to fit; err may be NULL). The caller frees what the library
 * allocates only through the matching *_destroy function, or
 * attnkit_string_free for returned strings; no C++ exception crosses this
 * API.
 *
 * Configs and reports cross the API as JSON: an AttentionConfig
 * (core/config.proto) or a report (harness/records.proto) in proto3's
 * JSON mapping with the field names of the .proto, enums by name, every
 * field present, 64-bit integers as numbers and an unset `optional` field
 * as null.
 *
 * Threads. A context may be used from several threads at once: backends
 * serialise what they must. Destroy a context only when no call is running.
 */
#ifndef ATTNKIT_ATTNKIT_ATTNKIT_H_
#define ATTNKIT_ATTNKIT_ATTNKIT_H_

#include <stddef.h>
#include <stdint.h>

#include "attnkit/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_C_API_VERSION 1u

typedef struct attnkit_context attnkit_context;

/* The library's version text, e.g.
 * "attnkit 0.24.0 (commit f5a4837c0d1e, c-api 1, plugin abi 1)". */
const char* attnkit_version(void);

/* sizeof the named struct as this library was compiled ("attnkit_problem",
 * "attnkit_tensor", "attnkit_args", "attnkit_caps", "attnkit_backend_info",
 * "attnkit_run_result", "attnkit_grads"), 0 for another name: bindings in other languages
 * check their mirrors of the structs against it when they load. */
size_t attnkit_struct_size(const char* name);

/* The layout of the named struct (the names attnkit_struct_size takes) as
 * this library was compiled, from the same field tables that declare the
 * structs, as JSON: {"name": ..., "size": N, "fields": [{"name": ...,
 * "offset": N, "size": N, "type": T}, ...]} in memory order, T one of i32,
 * u32, i64, u64, f32, ptr, ptr_i64, cstr, char[N], i64[4] or a struct's
 * name. A list field is two entries (ptr_i64 `name`, i64 `num_name`).
 * Bindings build their mirrors of the structs from it (the Python package
 * does, at import). NULL for an unknown name; the string is static. */
const char* attnkit_struct_layout(const char* name);

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
#define ATTNKIT_BACKEND_INFO_FIELDS(X)                                \
  X(CHARS64, name)                                                    \
  X(CHARS512, description)                                            \
  X(I32, available) /* ATTNKIT_OK, or why it cannot run here */       \
  X(CHARS512, unavailable_reason)                                     \
  X(I32, uses_host_memory) /* 1: host pointers; 0: device pointers */ \
  X(CAPS, caps)            /* caps.head_dims points into the context */

typedef struct attnkit_backend_info {
  uint32_t struct_size;
  ATTNKIT_BACKEND_INFO_FIELDS(ATTNKIT_DECLARE_FIELD)
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

/* What one attnkit_run (or attnkit_backward) did. The caller sets
 * struct_size. */
#define ATTNKIT_RUN_RESULT_FIELDS(X)                                                   \
  X(CHARS64, backend)           /* the backend that ran */                             \
  X(CHARS256, kernel)           /* its kernel, e.g. "flash-tiled/AVX3 q4xk16" */       \
  X(CHARS512, reason)           /* why this backend: named, or what auto chose, why */ \
  X(I64, workspace_allocations) /* -1 when the backend does not report it */

typedef struct attnkit_run_result {
  uint32_t struct_size;
  ATTNKIT_RUN_RESULT_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_run_result;

/* Computes o (and lse) for `p` on backend `backend` (a name, or "auto", or
 * NULL for p->backend) and waits for it to finish. "auto" chooses among the
 * host backends (args in host memory); for device memory name a device
 * backend (attnkit_backend_info.uses_host_memory == 0), e.g. "cuda". args' tensors are
 * validated against p first (shapes, dtypes, strides, overlap of outputs
 * with inputs). `result` may be NULL. */
int32_t attnkit_run(attnkit_context* ctx, const char* backend, const attnkit_problem* p,
                    const attnkit_args* args, attnkit_run_result* result, char* err,
                    size_t err_size);

/* The backward pass of attnkit_run (training): from the forward's q, k, v,
 * o and lse in `args` and dL/dO in grads->d_o, writes dL/dQ into grads->dq
 * (q's shape and dtype), dL/dK and dL/dV into grads->dk, grads->dv (k's
 * shape and kv_dtype, each summed over the query heads of its KV group) and,
 * when grads->dbias.data is set, dL/dbias (f32 [B, H, Tq, Tk], no stride-0
 * dims) for a problem with additive_bias; f32 accumulation, and a row with
 * no visible key gets dq = 0. `p` is the forward's problem and must have
 * return_lse = 1, with args->lse the lse that forward wrote (the backward
 * recomputes the attention weights from it). `backend`: a name, "auto" or
 * NULL (p->backend); "auto" takes the first host-memory backend of the auto
 * order whose backward supports p (result->reason says which, and what it
 * passed over), a name must support it. Errors: INVALID_ARGUMENT naming the
 * tensor or field (d_o missing, a shape or dtype that differs, outputs that
 * overlap inputs, return_lse off); UNIMPLEMENTED with the reason when no
 * backend (or the named one) has a backward for p: paged or int8 K/V never
 * do, and attnkit_backend_info's caps.bwd_* say what each backend takes.
 * grads->struct_size is sizeof(attnkit_grads) of the header the caller was
 * built with (at least up to dbias: fields added later, such as dsinks, are
 * then absent); `result` may be NULL. */
int32_t attnkit_backward(attnkit_context* ctx, const char* backend, const attnkit_problem* p,
                         const attnkit_args* args, const attnkit_grads* grads,
                         attnkit_run_result* result, char* err, size_t err_size);

/* Worker threads for a backend (CPU backends; others accept and ignore),
 * and the stream a device backend runs on (a cudaStream_t; NULL is CUDA's
 * legacy default stream). */
int32_t attnkit_set_num_threads(attnkit_context* ctx, const char* backend, int32_t n, char* err,
                                size_t err_size);
int32_t attnkit_set_stream(attnkit_context* ctx, const char* backend, void* stream, char* err,
                           size_t err_size);

/* ---- Strings, configs ------------------------------------------------ */

/* Frees a string returned through a `char** out` parameter (NULL is fine). */
void attnkit_string_free(char* s);

/* A text-format AttentionConfig (what `attnkit --config=F` reads) as JSON,
 * and back. Parse errors give the line and column; JSON with an unknown
 * field is refused naming it. Neither call checks the config's rules:
 * attnkit_config_validate does. */
int32_t attnkit_config_from_text(const char* text, char** json, char* err, size_t err_size);
int32_t attnkit_config_to_text(const char* config_json, char** text, char* err, size_t err_size);

/* The AttentionConfig message's fields, from its descriptor, as JSON:
 * {"name": "AttentionConfig", "fields": [F, ...]} in the order
 * config.proto declares them, each F {"name", "type":
 * int|float|bool|string|enum|message, "repeated", "default" (null for an
 * unset `optional` field or a message), "values" (an enum's names),
 * "message" (a message field's own schema, likewise)}. Bindings build
 * their config type from it (Python's AttentionConfig does), so a field
 * added to core/config.proto reaches them unwritten. */
int32_t attnkit_config_schema(char** json, char* err, size_t err_size);

/* ATTNKIT_OK when the config is a valid problem (every rule of `attnkit
 * check`); `id` (may be NULL) receives its problem id, e.g.
 * "b1_h8g2_q128_k128_d64_causal_f32". */
int32_t attnkit_config_validate(const char* config_json, char** id, char* err, size_t err_size);

/* What the config costs (ops/cost.h): a JSON object with the problem "id",
 * "useful_flops" (4 d per visible (query, key) pair), "dense_flops",
 * "visible_pairs", "bytes_moved" (every tensor read or written once),
 * "kv_cache_bytes" and "score_entries". */
int32_t attnkit_config_cost(const char* config_json, char** cost_json, char* err, size_t err_size);

/* The configs of a benchmark suite ("standard") as a JSON array. */
int32_t attnkit_suite(const char* name, char** configs_json, char* err, size_t err_size);

/* This machine, as compare reports it (and `attnkit peak --json`):
 * {"attnkit": build, "how": measured or cached, "machine":
 * MachineFingerprint, "limits": MachineLimits} (peak FMA per Highway target, read bandwidth,
 * OpenBLAS sgemm) for `threads` (0 = every core). refresh != 0 measures
 * now (about a second or two); otherwise a cached measurement for this CPU
 * and thread count is used when there is one. */
int32_t attnkit_machine_limits(int32_t threads, int32_t refresh, char** json, char* err,
                               size_t err_size);

/* ---- The jobs: check and compare ----------------------------------------- */

/* `attnkit check`: the backends named in `backends` (','-separated; NULL or
 * "" for all) on the config's random inputs (its seed), each compared with
 * the fp64 reference. A wrong answer is a result, not an error: the report
 * (a CheckReport as JSON) gives per backend "pass", "fail", "error",
 * "unavailable" or "unsupported", the errors and their fraction of the
 * oracle's bound. */
int32_t attnkit_check(attnkit_context* ctx, const char* config_json, const char* backends,
                      char** report_json, char* err, size_t err_size);

/* `attnkit compare`: every backend timed side by side, each output checked
 * first, figures scaled by this machine's limits measured in the same call.
 * The problems are `configs_json` (a JSON array of configs) or, when it is
 * NULL, the suite named `suite` ("standard"). threads: 0 = every core.
 * progress != 0 prints a line per measurement on stderr. The report is the
 * CompareReport `attnkit compare --json` writes. Measuring takes seconds
 * per problem and backend. */
int32_t attnkit_compare(attnkit_context* ctx, const char* configs_json, const char* suite,
                        const char* backends, int32_t threads, int32_t progress, char** report_json,
                        char* err, size_t err_size);

/* ---- The layer and its KV cache (ops/) ------------------------------------ */

/* A multi-head attention layer (ops/multi_head_attention.h):
 *   y = attention(x Wq^T + bq, c Wk^T + bk, c Wv^T + bv) Wo^T + bo
 * with c = x (self-attention) or a context (cross-attention). The config
 * (JSON) gives num_heads, num_kv_heads (GQA/MQA), head_dim, model_dim, the
 * mask and the backend ("auto" or a name); q_len and kv_len are not used.
 * Weights are f32 in PyTorch's nn.Linear orientation [out, in], initialised
 * from `seed` like nn.Linear; bias != 0 gives the projections bias vectors.
 * The layer uses ctx's backends: destroy it before ctx. One layer runs one
 * call at a time (it reuses its workspaces); use a layer per thread. */
typedef struct attnkit_layer attnkit_layer;
typedef struct attnkit_kv_cache attnkit_kv_cache;

int32_t attnkit_layer_create(attnkit_context* ctx, const char* config_json, int32_t bias,
                             uint64_t seed, attnkit_layer** out, char* err, size_t err_size);
void attnkit_layer_destroy(attnkit_layer* layer);

/* Weight `name` ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"): set from
 * an f32 or f16 tensor of its shape (wq [H*d, D], wk and wv [Hkv*d, D], wo
 * [D, H*d], biases [out]), or copied into an f32 tensor of its shape. */
int32_t attnkit_layer_set_weight(attnkit_layer* layer, const char* name,
                                 const attnkit_tensor* value, char* err, size_t err_size);
int32_t attnkit_layer_get_weight(const attnkit_layer* layer, const char* name,
                                 const attnkit_tensor* out, char* err, size_t err_size);

/* x, y: f32 [B, T, D] with a contiguous last dimension (y may be x).
 * context: NULL for self-attention, or f32 [B, Tk, D] (cross-attention).
 * `result` (may be NULL) says which backend and kernel ran, and why. */
int32_t attnkit_layer_forward(attnkit_layer* layer, const attnkit_tensor* x,
                              const attnkit_tensor* context, const attnkit_tensor* y,
                              attnkit_run_result* result, char* err, size_t err_size);

/* A KV cache for `layer`'s KV heads, head_dim and value head dim: batch
 * sequences of up to `capacity` tokens, stored as `dtype` (ATTNKIT_F32, F16,
 * BF16, or I8, F8E4M3, F8E5M2: quantized as appended, one f32 scale per
 * token and KV head). It may outlive the layer. */
int32_t attnkit_kv_cache_create(const attnkit_layer* layer, int64_t batch, int64_t capacity,
                                int32_t dtype, attnkit_kv_cache** out, char* err, size_t err_size);
/* A paged KV cache (ops/kv_cache.h): one pool of `num_pages` pages of
 * `page_size` tokens (a power of two in [16, 256]) for `batch` sequences,
 * each with its own block table; pages are taken as tokens are appended,
 * and attnkit_layer_forward_cached is RESOURCE_EXHAUSTED, with the cache
 * unchanged, when the pool runs out. The backend must support paged K/V.
 * attnkit_kv_cache_info's capacity is num_pages * page_size. */
int32_t attnkit_kv_cache_create_paged(const attnkit_layer* layer, int64_t batch, int64_t page_size,
                                      int64_t num_pages, int32_t dtype, attnkit_kv_cache** out,
                                      char* err, size_t err_size);
void attnkit_kv_cache_destroy(attnkit_kv_cache* cache);

/* Appends the keys and values of x's T tokens to `cache`, then the new
 * queries attend to every cached token of their sequence (bottom-right
 * causal unless the config says otherwise): T = 1 is a decode step, T > 1 a
 * (chunked) prefill. RESOURCE_EXHAUSTED, with the cache unchanged, when a
 * sequence would pass the capacity (a paged cache: when the pool has too
 * few free pages). */
int32_t attnkit_layer_forward_cached(attnkit_layer* layer, const attnkit_tensor* x,
                                     attnkit_kv_cache* cache, const attnkit_tensor* y,
                                     attnkit_run_result* result, char* err, size_t err_size);

/* The cache's shape (any pointer may be NULL), its bytes, and the length of
 * each sequence (`lengths` has room for `batch`). */
int32_t attnkit_kv_cache_info(const attnkit_kv_cache* cache, int64_t* batch, int64_t* capacity,
                              int64_t* bytes, int64_t* lengths, int64_t lengths_size, char* err,
                              size_t err_size);
/* Sets each sequence's length (keeping the contents: a rollback after
 * speculative decoding, or 0 to start over). A paged cache only shrinks:
 * the pages past the new lengths are released. */
int32_t attnkit_kv_cache_set_lengths(attnkit_kv_cache* cache, const int64_t* lengths, int64_t count,
                                     char* err, size_t err_size);
/* Sequence dst continues from the first `tokens` tokens of sequence src (a
 * shared prompt prefix); dst's own tokens are dropped. A paged cache shares
 * src's pages (a shared, partially filled page is copied before either
 * sequence writes to it), a dense one copies the rows. */
int32_t attnkit_kv_cache_fork(attnkit_kv_cache* cache, int64_t src, int64_t dst, int64_t tokens,
                              char* err, size_t err_size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_ATTNKIT_ATTNKIT_H_ */

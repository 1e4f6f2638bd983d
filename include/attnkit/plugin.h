/* The backend plugin ABI: plain C, so that a plugin built with another
 * compiler, C++ standard library, Abseil or protobuf than the host's loads
 * and runs safely. Nothing but these structs, integers, floats, pointers and
 * C strings crosses the boundary.
 *
 * A plugin is a shared object exporting one symbol,
 *
 *   const attnkit_plugin* attnkit_plugin_entry(void);
 *
 * returning a table that lives as long as the library. Each backend it
 * provides is an opaque instance pointer plus a function table
 * (attnkit_backend_ops). include/attnkit/plugin_sdk.h writes all of this for a C++
 * class; plugin/plugin_table_backend.h is the host's side.
 *
 * Compatibility. Every struct starts with `struct_size`, the sizeof the
 * writer was compiled with. Fields are only ever appended, so
 *   - a newer host loading an older plugin reads only the fields the plugin's
 *     struct_size covers; a missing optional function means "not provided"
 *     and the host says so when it is needed;
 *   - a struct the host passes in (problem, args, caps, run info) carries the
 *     host's size; a plugin writes and reads only what both know.
 * `abi_version` changes only when an existing field changes meaning; the host
 * refuses a plugin whose version it does not know, naming both versions.
 *
 * Errors. Fallible functions return an attnkit status code (the numbering of
 * absl::StatusCode) and write a NUL-terminated message into the caller's
 * buffer `err` of `err_size` bytes (truncated to fit). The plugin allocates
 * nothing the host frees: device buffers are released through the backend's
 * own free_buffer, strings the plugin returns stay owned by it. No C++
 * exception may leave a plugin function. */
#ifndef ATTNKIT_ATTNKIT_PLUGIN_H_
#define ATTNKIT_ATTNKIT_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#include "attnkit/abi_fields.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_PLUGIN_ABI_VERSION 1u
#define ATTNKIT_PLUGIN_ENTRY_SYMBOL "attnkit_plugin_entry"

/* Status codes (absl::StatusCode numbering). */
enum {
  ATTNKIT_OK = 0,
  ATTNKIT_CANCELLED = 1,
  ATTNKIT_UNKNOWN = 2,
  ATTNKIT_INVALID_ARGUMENT = 3,
  ATTNKIT_DEADLINE_EXCEEDED = 4,
  ATTNKIT_NOT_FOUND = 5,
  ATTNKIT_ALREADY_EXISTS = 6,
  ATTNKIT_PERMISSION_DENIED = 7,
  ATTNKIT_RESOURCE_EXHAUSTED = 8,
  ATTNKIT_FAILED_PRECONDITION = 9,
  ATTNKIT_ABORTED = 10,
  ATTNKIT_OUT_OF_RANGE = 11,
  ATTNKIT_UNIMPLEMENTED = 12,
  ATTNKIT_INTERNAL = 13,
  ATTNKIT_UNAVAILABLE = 14,
  ATTNKIT_DATA_LOSS = 15
};

/* Element types, masks, alignments, layouts (core/dtype.h, problem.h,
 * tensor.h use the same numbers). */
enum {
  ATTNKIT_F32 = 0,
  ATTNKIT_F16 = 1,
  ATTNKIT_BF16 = 2,
  ATTNKIT_I32 = 3,
  ATTNKIT_U8 = 4,
  ATTNKIT_I8 = 5,
  /* Since 0.29: K/V in OCP FP8 times a row scale, like I8 (core/fp8.h). */
  ATTNKIT_F8E4M3 = 6,
  ATTNKIT_F8E5M2 = 7
};
enum { ATTNKIT_MASK_NONE = 0, ATTNKIT_MASK_CAUSAL = 1, ATTNKIT_MASK_SLIDING_WINDOW = 2 };
enum { ATTNKIT_ALIGN_TOP_LEFT = 0, ATTNKIT_ALIGN_BOTTOM_RIGHT = 1 };
enum { ATTNKIT_LAYOUT_BHTD = 0, ATTNKIT_LAYOUT_BTHD = 1 };
/* config.proto compute: EXACT multiplies exactly widened storage values;
 * FAST may round Q to K's storage type and P to V's (core/fast_compute.h). */
enum { ATTNKIT_COMPUTE_EXACT = 0, ATTNKIT_COMPUTE_FAST = 1 };

/* One attention problem: every field of attnkit::AttentionProblem
 * (core/problem.h gives the meaning of each; the C++ member has the same
 * name). Strings and lists are borrowed for the duration of the call.
 * Rows X(KIND, name) in ABI order, only ever appended (attnkit/abi_fields.h
 * gives each kind's C declaration). */
#define ATTNKIT_PROBLEM_FIELDS(X)                                      \
  X(DTYPE, dtype)    /* Q and O storage */                             \
  X(DTYPE, kv_dtype) /* K and V storage */                             \
  X(LAYOUT, layout)                                                    \
  X(MASK, mask)                                                        \
  X(ALIGNMENT, alignment)                                              \
  X(I64, batch)                                                        \
  X(I64, num_heads)                                                    \
  X(I64, num_kv_heads)                                                 \
  X(I64, head_dim)                                                     \
  X(I64, model_dim)                                                    \
  X(I64, q_len)                                                        \
  X(I64, kv_len)                                                       \
  X(I64, window_left)                                                  \
  X(I64, window_right)                                                 \
  X(F32, scale)                                                        \
  X(F32, softcap)         /* 0 = off */                                \
  X(I64_LIST, kv_lengths) /* 0 or batch values */                      \
  X(BOOL, blocked_mask)                                                \
  X(BOOL, additive_bias)                                               \
  X(BOOL, return_lse)                                                  \
  X(BOOL, poison_blocked)                                              \
  X(I64, nonfinite_inputs)                                             \
  X(I64, memory_budget_bytes)                                          \
  X(U64, seed)                                                         \
  X(STR, name)                                                         \
  X(STR, backend)                                                      \
  /* Since 0.25: paged K/V and ragged batches (0 / NULL: dense). */    \
  X(I64, page_size)                                                    \
  X(I64, num_pages)                                                    \
  X(I64_LIST, q_lengths) /* 0 or batch values */                       \
  /* Since 0.26: a training step's problem (config.proto backward). */ \
  X(BOOL, backward)                                                    \
  /* Since 0.27: the compute mode (ATTNKIT_COMPUTE_*; 0 = exact). */   \
  X(COMPUTE, compute)                                                  \
  /* Since 0.28: attention sinks (args.sinks, one logit per head). */  \
  X(BOOL, sinks)                                                       \
  /* Since 0.28: ALiBi (args.alibi_slopes, one slope per head). */     \
  X(BOOL, alibi)                                                       \
  /* Since 0.29: Ev, V's and O's head dim; 0 = head_dim. */            \
  X(I64, value_head_dim)

typedef struct attnkit_problem {
  uint32_t struct_size;
  ATTNKIT_PROBLEM_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_problem;

/* A strided view; data NULL means absent. Shapes and strides in elements. */
#define ATTNKIT_TENSOR_FIELDS(X) \
  X(PTR, data)                   \
  X(I32, dtype)                  \
  X(I32, rank) /* 0..4 */        \
  X(I64_4, shape)                \
  X(I64_4, strides)

typedef struct attnkit_tensor {
  ATTNKIT_TENSOR_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_tensor;

/* The tensors of one call (attnkit::AttentionArgs, same member names, gives
 * shapes and rules). Data lives in memory the backend allocated (host
 * memory for host backends). */
#define ATTNKIT_ARGS_FIELDS(X)                                  \
  X(TENSOR, q)                                                  \
  X(TENSOR, k)                                                  \
  X(TENSOR, v)                                                  \
  X(TENSOR, o)                                                  \
  X(TENSOR, lse)                                                \
  X(TENSOR, kv_lengths)                                         \
  X(TENSOR, blocked_mask)                                       \
  X(TENSOR, bias)                                               \
  /* Since 0.25: int8 K/V scales, paged K/V, ragged batches. */ \
  X(TENSOR, k_scale)                                            \
  X(TENSOR, v_scale)                                            \
  X(TENSOR, block_table)                                        \
  X(TENSOR, cu_seqlens_q)                                       \
  X(TENSOR, cu_seqlens_k)                                       \
  /* Since 0.28: the sink logits, f32 [H]. */                   \
  X(TENSOR, sinks)                                              \
  /* Since 0.28: the ALiBi slopes, f32 [H]. */                  \
  X(TENSOR, alibi_slopes)

typedef struct attnkit_args {
  uint32_t struct_size;
  ATTNKIT_ARGS_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_args;

/* What a backend can run (attnkit::Capabilities). Sets are bit masks:
 * bit (1 << value) for each supported dtype, mask, alignment, layout.
 * Rows X(KIND, name, cpp_member): the C field and the attnkit::Capabilities
 * member it carries; bwd_* are the backward pass's
 * (attnkit::BackwardCapabilities), all 0 when the plugin has none.
 * head_dims: the only head dims, or NULL for any in range; owned by the
 * plugin, valid while it is loaded. */
#define ATTNKIT_CAPS_FIELDS(X)                           \
  X(DTYPE_SET, dtypes, dtypes)                           \
  X(DTYPE_SET, kv_dtypes, kv_dtypes)                     \
  X(MASK_SET, masks, masks)                              \
  X(ALIGNMENT_SET, alignments, alignments)               \
  X(LAYOUT_SET, layouts, layouts)                        \
  X(I64, min_head_dim, min_head_dim)                     \
  X(I64, max_head_dim, max_head_dim)                     \
  X(I64_LIST, head_dims, head_dims)                      \
  X(I64, max_group_size, max_group_size) /* 0 = any */   \
  X(BOOL, lse, lse)                                      \
  X(BOOL, kv_lengths, kv_lengths)                        \
  X(BOOL, blocked_mask, blocked_mask)                    \
  X(BOOL, additive_bias, additive_bias)                  \
  X(BOOL, softcap, softcap)                              \
  X(BOOL, deterministic, deterministic)                  \
  X(BOOL, paged_kv, paged_kv) /* since 0.25 */           \
  X(BOOL, ragged, ragged)                                \
  /* Since 0.26: the backward pass. */                   \
  X(BOOL, bwd_supported, backward.supported)             \
  X(DTYPE_SET, bwd_dtypes, backward.dtypes)              \
  X(DTYPE_SET, bwd_kv_dtypes, backward.kv_dtypes)        \
  X(MASK_SET, bwd_masks, backward.masks)                 \
  X(BOOL, bwd_kv_lengths, backward.kv_lengths)           \
  X(BOOL, bwd_blocked_mask, backward.blocked_mask)       \
  X(BOOL, bwd_additive_bias, backward.additive_bias)     \
  X(BOOL, bwd_bias_grad, backward.bias_grad)             \
  X(BOOL, bwd_softcap, backward.softcap)                 \
  X(BOOL, bwd_ragged, backward.ragged)                   \
  X(BOOL, bwd_deterministic, backward.deterministic)     \
  /* Since 0.27: the K/V storage types for which FAST    \
   * computes in the storage type (others run EXACT). */ \
  X(DTYPE_SET, fast_kv_dtypes, fast_kv_dtypes)           \
  /* Since 0.28: attention sinks (problem.sinks). */     \
  X(BOOL, sinks, sinks)                                  \
  /* Since 0.28: ALiBi (problem.alibi). */               \
  X(BOOL, alibi, alibi)                                  \
  X(BOOL, bwd_alibi, backward.alibi)                     \
  X(BOOL, bwd_sinks, backward.sinks)                     \
  /* Since 0.29: Ev != E (problem.value_head_dim). */    \
  X(BOOL, value_head_dim, value_head_dim)                \
  X(BOOL, bwd_value_head_dim, backward.value_head_dim)

typedef struct attnkit_caps {
  uint32_t struct_size;
  ATTNKIT_CAPS_FIELDS(ATTNKIT_DECLARE_FIELD3)
} attnkit_caps;

/* Since 0.26: the gradients of one backward call (attnkit::GradArgs gives
 * shapes and rules); dbias data NULL means not asked for. */
#define ATTNKIT_GRADS_FIELDS(X)                                   \
  X(TENSOR, d_o)                                                  \
  X(TENSOR, dq)                                                   \
  X(TENSOR, dk)                                                   \
  X(TENSOR, dv)                                                   \
  X(TENSOR, dbias)                                                \
  /* Since 0.28: dL/dsinks, f32 [H]; data NULL: not asked for. */ \
  X(TENSOR, dsinks)

typedef struct attnkit_grads {
  uint32_t struct_size;
  ATTNKIT_GRADS_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_grads;

/* What ran. The host zero-fills it (workspace_allocations = -1) and sets
 * struct_size; the backend fills what it knows. */
#define ATTNKIT_RUN_INFO_FIELDS(X)                                                   \
  X(CHARS256, kernel)           /* e.g. "flash-tiled/AVX3 q4xk16", NUL-terminated */ \
  X(I64, workspace_allocations) /* -1: not reported */

typedef struct attnkit_run_info {
  uint32_t struct_size;
  ATTNKIT_RUN_INFO_FIELDS(ATTNKIT_DECLARE_FIELD)
} attnkit_run_info;

/* A backend's functions. `self` is the instance create_backend returned.
 * Required: destroy, name, description, capabilities, forward. The others
 * may be NULL (or lie past an older plugin's struct_size): the host then
 * treats the backend as a host-memory, single-threaded, always available one
 * that accepts what its capabilities cover, and SetStream is Unimplemented. */
typedef struct attnkit_backend_ops {
  uint32_t struct_size;
  void (*destroy)(void* self);
  const char* (*name)(void* self);        /* owned by the instance */
  const char* (*description)(void* self); /* owned by the instance */
  void (*capabilities)(void* self, attnkit_caps* caps);
  /* Computes o (and lse) for a problem the host validated against args and
   * checked with supports(). */
  int32_t (*forward)(void* self, const attnkit_problem* p, const attnkit_args* args,
                     attnkit_run_info* info, char* err, size_t err_size);
  int32_t (*available)(void* self, char* err, size_t err_size);
  /* More than the capabilities: a reason a person can act on. */
  int32_t (*supports)(void* self, const attnkit_problem* p, char* err, size_t err_size);
  /* Memory. uses_host_memory returns 1 for host memory (then the four
   * functions below may be NULL: the host allocates aligned host memory). */
  int32_t (*uses_host_memory)(void* self);
  int32_t (*allocate)(void* self, size_t bytes, void** data, char* err, size_t err_size);
  void (*free_buffer)(void* self, void* data);
  int32_t (*upload)(void* self, void* dst, const void* host, size_t bytes, char* err,
                    size_t err_size);
  int32_t (*download)(void* self, const void* src, void* host, size_t bytes, char* err,
                      size_t err_size);
  int32_t (*synchronize)(void* self, char* err, size_t err_size);
  int32_t (*set_num_threads)(void* self, int32_t n, char* err, size_t err_size);
  int32_t (*num_threads)(void* self);
  int32_t (*set_stream)(void* self, void* stream, char* err, size_t err_size);
  /* Since 0.26, both optional. supports_backward: more than the backward
   * capabilities, as supports. backward: dq, dk, dv (and dbias) for a
   * problem the host validated and checked with supports_backward. */
  int32_t (*supports_backward)(void* self, const attnkit_problem* p, char* err, size_t err_size);
  int32_t (*backward)(void* self, const attnkit_problem* p, const attnkit_args* args,
                      const attnkit_grads* grads, attnkit_run_info* info, char* err,
                      size_t err_size);
} attnkit_backend_ops;

/* The table attnkit_plugin_entry returns. */
typedef struct attnkit_plugin {
  uint32_t struct_size;
  uint32_t abi_version; /* ATTNKIT_PLUGIN_ABI_VERSION it was built with */
  const char* name;     /* the plugin's name, for messages */
  uint32_t num_backends;
  /* Creates backend `index` (< num_backends): *self and *ops on success; the
   * host calls ops->destroy(self) when done. */
  int32_t (*create_backend)(uint32_t index, void** self, const attnkit_backend_ops** ops, char* err,
                            size_t err_size);
} attnkit_plugin;

typedef const attnkit_plugin* (*attnkit_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_ATTNKIT_PLUGIN_H_ */

/* The field kinds of attnkit's C structs, and how each is declared in C.
 *
 * Every struct that crosses the plugin ABI or the C API is written once, as
 * a table of rows X(KIND, name) (attnkit/plugin.h, attnkit/attnkit.h); the
 * struct itself, the C++ conversions (plugin/c_abi.cc), the layouts the C
 * API exports (attnkit_struct_layout) and so the Python package's ctypes
 * structures all come from that one table. A table's order is the ABI's:
 * rows are only ever appended.
 *
 * The kinds and their C declarations:
 *   DTYPE, LAYOUT, MASK, ALIGNMENT, int32_t, an ATTNKIT_* enum value
 *   COMPUTE
 *   I32                             int32_t
 *   BOOL                            int32_t, 0 or 1
 *   I64 / U64 / F32                 int64_t / uint64_t / float
 *   STR                             const char*, borrowed, never NULL
 *   I64_LIST                        const int64_t* name; int64_t num_name;
 *                                   (num_name values, or NULL and 0)
 *   DTYPE_SET, MASK_SET,            uint32_t, bit (1 << value) per member
 *   ALIGNMENT_SET, LAYOUT_SET
 *   PTR                             void*
 *   I64_4                           int64_t name[4]
 *   CHARS64 / CHARS256 / CHARS512   char name[N], NUL-terminated
 *   TENSOR / CAPS                   attnkit_tensor / attnkit_caps
 */
#ifndef ATTNKIT_ABI_FIELDS_H_
#define ATTNKIT_ABI_FIELDS_H_

#define ATTNKIT_DECL_DTYPE(n) int32_t n;
#define ATTNKIT_DECL_LAYOUT(n) int32_t n;
#define ATTNKIT_DECL_MASK(n) int32_t n;
#define ATTNKIT_DECL_ALIGNMENT(n) int32_t n;
#define ATTNKIT_DECL_COMPUTE(n) int32_t n;
#define ATTNKIT_DECL_I32(n) int32_t n;
#define ATTNKIT_DECL_BOOL(n) int32_t n;
#define ATTNKIT_DECL_I64(n) int64_t n;
#define ATTNKIT_DECL_U64(n) uint64_t n;
#define ATTNKIT_DECL_F32(n) float n;
#define ATTNKIT_DECL_STR(n) const char* n;
#define ATTNKIT_DECL_I64_LIST(n) \
  const int64_t* n;              \
  int64_t num_##n;
#define ATTNKIT_DECL_DTYPE_SET(n) uint32_t n;
#define ATTNKIT_DECL_MASK_SET(n) uint32_t n;
#define ATTNKIT_DECL_ALIGNMENT_SET(n) uint32_t n;
#define ATTNKIT_DECL_LAYOUT_SET(n) uint32_t n;
#define ATTNKIT_DECL_PTR(n) void* n;
#define ATTNKIT_DECL_I64_4(n) int64_t n[4];
#define ATTNKIT_DECL_CHARS64(n) char n[64];
#define ATTNKIT_DECL_CHARS256(n) char n[256];
#define ATTNKIT_DECL_CHARS512(n) char n[512];
#define ATTNKIT_DECL_TENSOR(n) attnkit_tensor n;
#define ATTNKIT_DECL_CAPS(n) attnkit_caps n;

/* For code that expands a table: ATTNKIT_LIST_COUNT(KIND, obj, name) is
 * `, obj.num_name` for a list kind, which keeps its count in a second
 * member, and nothing for every other kind (an extra argument where a
 * field's value is passed). */
#define ATTNKIT_LIST_COUNT(kind, obj, name) ATTNKIT_LIST_COUNT_##kind(obj, name)
#define ATTNKIT_LIST_COUNT_I64_LIST(obj, name) , obj.num_##name
#define ATTNKIT_LIST_COUNT_DTYPE(obj, name)
#define ATTNKIT_LIST_COUNT_LAYOUT(obj, name)
#define ATTNKIT_LIST_COUNT_MASK(obj, name)
#define ATTNKIT_LIST_COUNT_ALIGNMENT(obj, name)
#define ATTNKIT_LIST_COUNT_COMPUTE(obj, name)
#define ATTNKIT_LIST_COUNT_I32(obj, name)
#define ATTNKIT_LIST_COUNT_BOOL(obj, name)
#define ATTNKIT_LIST_COUNT_I64(obj, name)
#define ATTNKIT_LIST_COUNT_U64(obj, name)
#define ATTNKIT_LIST_COUNT_F32(obj, name)
#define ATTNKIT_LIST_COUNT_STR(obj, name)
#define ATTNKIT_LIST_COUNT_DTYPE_SET(obj, name)
#define ATTNKIT_LIST_COUNT_MASK_SET(obj, name)
#define ATTNKIT_LIST_COUNT_ALIGNMENT_SET(obj, name)
#define ATTNKIT_LIST_COUNT_LAYOUT_SET(obj, name)
#define ATTNKIT_LIST_COUNT_PTR(obj, name)
#define ATTNKIT_LIST_COUNT_I64_4(obj, name)
#define ATTNKIT_LIST_COUNT_CHARS64(obj, name)
#define ATTNKIT_LIST_COUNT_CHARS256(obj, name)
#define ATTNKIT_LIST_COUNT_CHARS512(obj, name)
#define ATTNKIT_LIST_COUNT_TENSOR(obj, name)
#define ATTNKIT_LIST_COUNT_CAPS(obj, name)

/* X for a table of rows X(KIND, name): declares the field. */
#define ATTNKIT_DECLARE_FIELD(kind, name) ATTNKIT_DECL_##kind(name)
/* X for a table of rows X(KIND, name, cpp_member): the C side only. */
#define ATTNKIT_DECLARE_FIELD3(kind, name, cpp_member) ATTNKIT_DECL_##kind(name)

#endif /* ATTNKIT_ABI_FIELDS_H_ */

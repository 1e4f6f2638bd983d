// Prefetch instructions the compiler keeps. GCC 12 deletes a loop whose
// body is only prefetches (__builtin_prefetch, _mm_prefetch, hwy::Prefetch)
// in some nestings, as a loop without effects: the Highway backend's
// prefetch of int8 and fp8 row scales was missing from its binary so
// (objdump: no prefetcht0 in the int8 decode's tile loop). Inline assembly
// marked volatile is never deleted. Elsewhere than x86-64 with GCC or
// Clang these are __builtin_prefetch, or nothing.
#ifndef ATTNKIT_PLATFORM_PREFETCH_H_
#define ATTNKIT_PLATFORM_PREFETCH_H_

#include <cstddef>
#include <cstdint>

namespace attnkit {

// The line holding p into L1 (prefetcht0).
inline void PrefetchL1(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__GNUC__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}

// The line holding p into L2 (prefetcht1).
inline void PrefetchL2(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__GNUC__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}

// Every line bytes (> 0) at p touch into L1, wherever p lies in its line.
inline void PrefetchSpanL1(const void* p, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{63};
  for (uintptr_t line = first; line <= last; line += 64) {
    PrefetchL1(reinterpret_cast<const void*>(line));
  }
}

// Rows [from, to) of a matrix into L1 (PrefetchRowsL1) or L2
// (PrefetchRowsL2), a line at a time: row j's first `bytes` bytes at
// rows + j * ld. Rows back to back (ld == bytes) are one run of lines.
template <void (*kPrefetch)(const void*)>
inline void PrefetchRowsWith(const void* rows, size_t ld, size_t bytes, size_t from, size_t to) {
  const uint8_t* base = static_cast<const uint8_t*>(rows);
  if (ld == bytes) {
    for (size_t off = from * ld; off < to * ld; off += 64) kPrefetch(base + off);
    return;
  }
  for (size_t j = from; j < to; ++j) {
    for (size_t off = 0; off < bytes; off += 64) kPrefetch(base + j * ld + off);
  }
}
inline void PrefetchRowsL1(const void* rows, size_t ld, size_t bytes, size_t from, size_t to) {
  PrefetchRowsWith<PrefetchL1>(rows, ld, bytes, from, to);
}
inline void PrefetchRowsL2(const void* rows, size_t ld, size_t bytes, size_t from, size_t to) {
  PrefetchRowsWith<PrefetchL2>(rows, ld, bytes, from, to);
}

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_PREFETCH_H_

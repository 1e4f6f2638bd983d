// Prefetch instructions the compiler keeps. GCC 12 deletes a loop whose
// body is only prefetches (__builtin_prefetch, _mm_prefetch, hwy::Prefetch)
// in some nestings, as a loop without effects: the Highway backend's
// prefetch of int8 and fp8 row scales was missing from its binary so
// (objdump: no prefetcht0 in the int8 decode's tile loop). Inline assembly
// marked volatile is never deleted. Elsewhere than x86-64 with GCC or
// Clang these are __builtin_prefetch, or nothing.
#ifndef ATTNKIT_PLATFORM_PREFETCH_H_
#define ATTNKIT_PLATFORM_PREFETCH_H_

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

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_PREFETCH_H_

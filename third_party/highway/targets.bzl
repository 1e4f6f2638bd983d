"""The Highway targets compiled into every attnkit SIMD file, in one place.

Highway 1.0.3 compiles AVX3, AVX2, SSE4, SSSE3 and the scalar fallback by
default. We add AVX3_DL (picked at run time on CPUs that have it) and drop
SSSE3 (no CPU worth tuning for lacks SSE4; it would only cost compile time).
With --define=hwy_max_target=avx2 (a sanitizer build on a CPU without
AVX-512, tools/ci_hardening.sh) the AVX-512 targets are dropped too.
Every cc_library/cc_test that includes hwy/foreach_target.h uses these.
"""

HWY_LOCAL_DEFINES = select({
    "//third_party/highway:max_target_avx2": [
        "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_AVX3|HWY_AVX3_DL)",
    ],
    "//conditions:default": [
        "HWY_WANT_AVX3_DL",
        "HWY_DISABLED_TARGETS=HWY_SSSE3",
    ],
})

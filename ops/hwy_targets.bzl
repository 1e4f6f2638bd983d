"""The Highway targets compiled into ops/ SIMD files.

Highway 1.0.3 compiles AVX3, AVX2, SSE4, SSSE3 and the scalar fallback by
default; AVX3_DL is added (picked at run time where the CPU has it) and SSSE3
dropped (compile time only). Same values as the highway backend's constant.
"""

HWY_LOCAL_DEFINES = [
    "HWY_WANT_AVX3_DL",
    "HWY_DISABLED_TARGETS=HWY_SSSE3",
]

"""Build helpers for the CUDA backend plugin.

CUDA is built when nvcc was detected (tools/cuda_detect.bzl), unless forced:
--config=cuda (--define=cuda=1) builds it, failing if nvcc is missing;
--config=nocuda (--define=cuda=0) leaves it out.
"""

load("@local_cuda//:defs.bzl", "CUDA_DETECTED", "NVCC")

def if_cuda(then, otherwise = []):
    """Selects `then` when the CUDA backend is built, else `otherwise`."""
    return select({
        "//backends/cuda:cuda_forced_on": then,
        "//backends/cuda:cuda_forced_off": otherwise,
        "//conditions:default": then if CUDA_DETECTED else otherwise,
    })

# target_compatible_with for targets that need nvcc or a CUDA library: they
# show as SKIPPED under //... when CUDA is not built.
CUDA_ONLY = if_cuda([], ["@platforms//:incompatible"])

# sm_80 and sm_90 machine code plus compute_90 PTX (JIT-compiled on newer GPUs).
NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "-ccbin /usr/bin/g++",
    "-Xcompiler -fPIC",
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
    "-Werror all-warnings",
    "-I.",
    "-Iinclude",
]

def cuda_object(name, src, hdrs = []):
    """Compiles one .cu file with nvcc into `<name>.o` (one action per file,
    so the two cores compile in parallel and edits rebuild one file).
    `hdrs` lists every header the file includes; they are the action's inputs."""
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".o"],
        cmd = "%s %s -c $(location %s) -o $@" % (NVCC, " ".join(NVCC_FLAGS), src),
        target_compatible_with = CUDA_ONLY,
        message = "nvcc " + src,
    )

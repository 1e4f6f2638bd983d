"""backend_test: a cc_test run on every registered backend and on the
reference plugin, loaded through the dlopen route, plus the CUDA plugin
when CUDA is built (it skips its cases with the reason when no GPU is usable)."""

load("//backends/cuda:build_defs.bzl", "if_cuda")

_PLUGIN = "//backends/reference:libattnkit_reference_plugin.so"
_CUDA_PLUGIN = "//backends/cuda:libattnkit_cuda.so"

def backend_test(name, srcs, deps = [], size = "medium", **kwargs):
    native.cc_test(
        name = name,
        srcs = srcs,
        size = size,
        args = ["--plugin=$(rootpath %s)" % _PLUGIN] +
               if_cuda(["--plugin=$(rootpath %s)" % _CUDA_PLUGIN]),
        data = [_PLUGIN] + if_cuda([_CUDA_PLUGIN]),
        deps = deps + [
            "//tests:backend_test_env",
            "//backends:builtin",
            "//core:problem_data",
            "//core:reference",
            "@sys//:gtest",
        ],
        **kwargs
    )

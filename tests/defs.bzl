"""backend_test: a cc_test run on every registered backend and on the
plugins, loaded through the dlopen route: the reference plugin, the plugin
built with clang and libc++ (//tests:libcxx_plugin), the oneDNN backend
(which exists only as a plugin), and the CUDA plugin
when CUDA is built (it skips its cases with the reason when no GPU is usable)."""

load("//backends/cuda:build_defs.bzl", "if_cuda")

_PLUGIN = "//backends/reference:libattnkit_reference_plugin.so"
_LIBCXX_PLUGIN = "//tests:abi/libattnkit_libcxx_plugin.so"
_CUDA_PLUGIN = "//backends/cuda:libattnkit_cuda.so"
_ONEDNN_PLUGIN = "//backends/plugins:libattnkit_onednn.so"

def backend_test(name, srcs, deps = [], size = "medium", **kwargs):
    native.cc_test(
        name = name,
        srcs = srcs,
        size = size,
        args = [
            "--plugin=$(rootpath %s)" % _PLUGIN,
            "--plugin=$(rootpath %s)" % _LIBCXX_PLUGIN,
            "--plugin=$(rootpath %s)" % _ONEDNN_PLUGIN,
        ] + if_cuda(["--plugin=$(rootpath %s)" % _CUDA_PLUGIN]),
        data = [_PLUGIN, _LIBCXX_PLUGIN, _ONEDNN_PLUGIN] + if_cuda([_CUDA_PLUGIN]),
        deps = deps + [
            "//tests:backend_test_env",
            "//backends:builtin",
            "//harness:problem_data",
            "//oracle:reference",
            "@sys//:gtest",
        ],
        **kwargs
    )

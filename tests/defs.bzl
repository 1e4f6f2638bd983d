"""backend_test: a cc_test run on every registered backend and on the
reference plugin, loaded through the dlopen route."""

_PLUGIN = "//backends/reference:libattnkit_reference_plugin.so"

def backend_test(name, srcs, deps = [], size = "medium", **kwargs):
    native.cc_test(
        name = name,
        srcs = srcs,
        size = size,
        args = ["--plugin=$(rootpath %s)" % _PLUGIN],
        data = [_PLUGIN],
        deps = deps + [
            "//tests:backend_test_env",
            "//backends:builtin",
            "//core:problem_data",
            "//core:reference",
            "@sys//:gtest",
        ],
        **kwargs
    )

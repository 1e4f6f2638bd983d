"""attnkit_plugin: a backend plugin shared object (include/attnkit/plugin.h).

The object exports only attnkit_plugin_entry (hidden visibility plus the
version script plugin/plugin_exports.lds) and must resolve every symbol it uses
from its own dependencies (-z defs): it never binds to the host's copies of
core/ or Abseil, so the host needs no -rdynamic.
"""

def attnkit_plugin(name, srcs, deps, **kwargs):
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = ["-fvisibility=hidden"],
        linkshared = True,
        linkopts = [
            "-Wl,--version-script=$(location //plugin:plugin_exports.lds)",
            "-Wl,-z,defs",
        ],
        additional_linker_inputs = ["//plugin:plugin_exports.lds"],
        deps = deps,
        **kwargs
    )

"""attnkit_fuzz_test: a libFuzzer target run for a few seconds as a test.

`srcs` define LLVMFuzzerTestOneInput. In the normal build the target links
tests/fuzz/fuzz_driver.cc (replay the corpus, then seeded mutations); under
--config=fuzz (clang-14, -fsanitize=fuzzer,address,undefined) it is a real
libFuzzer binary. Either way `<name>_bin` can be run by hand for longer
(tools/fuzz.sh) and the test runs it for `seconds` over corpus/<corpus>/.
"""

def attnkit_fuzz_test(name, srcs, deps, corpus, dict, seconds = 3):
    native.cc_binary(
        name = name + "_bin",
        testonly = True,
        srcs = srcs,
        deps = deps + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:fuzz_driver"],
        }),
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.sh_test(
        name = name,
        size = "small",
        srcs = ["run_fuzzer.sh"],
        args = [
            "$(rootpath :%s_bin)" % name,
            "tests/fuzz/corpus/" + corpus,
            "$(rootpath %s)" % dict,
            str(seconds),
        ],
        data = [":%s_bin" % name, dict] + native.glob(["corpus/%s/*" % corpus]),
    )

// A shared library without the attnkit entry point.
extern "C" __attribute__((visibility("default"))) int some_other_function(void) { return 42; }

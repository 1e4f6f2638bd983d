// FUZZ_CHECK: a property a fuzz target asserts. On failure it prints the
// condition and aborts, which both libFuzzer and tests/fuzz/fuzz_driver.cc
// report as a crash and keep the input of.
#ifndef ATTNKIT_TESTS_FUZZ_FUZZ_CHECK_H_
#define ATTNKIT_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#endif  // ATTNKIT_TESTS_FUZZ_FUZZ_CHECK_H_

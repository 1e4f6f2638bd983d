// Fuzzes the .npy reader: any bytes either fail with a status or give an
// array that serialises back to an equal array.
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "io/npy.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  constexpr int64_t kMaxBytes = int64_t{1} << 20;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto array = ParseNpy(bytes, "fuzz", kMaxBytes);
  if (!array.ok()) return 0;
  const TensorView& t = array->tensor.view();
  FUZZ_CHECK(t.NumElements() * int64_t(DTypeSize(t.dtype)) <= kMaxBytes, "over the limit");
  auto written = SerializeNpy(t);
  FUZZ_CHECK(written.ok(), "%s", std::string(written.status().message()).c_str());
  auto again = ParseNpy(*written, "round trip", kMaxBytes);
  FUZZ_CHECK(again.ok(), "%s", std::string(again.status().message()).c_str());
  FUZZ_CHECK(again->shape == array->shape, "shape changed");
  const TensorView& u = again->tensor.view();
  FUZZ_CHECK(u.dtype == t.dtype, "dtype changed");
  const size_t n = static_cast<size_t>(t.NumElements()) * DTypeSize(t.dtype);
  FUZZ_CHECK(n == 0 || std::memcmp(t.data, u.data, n) == 0, "data changed");
  return 0;
}

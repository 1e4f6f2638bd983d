// NumPy .npy files (format versions 1.0 to 3.0): little-endian float32,
// float16, int32, uint8 and bool arrays in C order. Anything else is refused
// with the reason; a header whose shape would exceed the byte budget is
// refused before the body is read.
#ifndef ATTNKIT_IO_NPY_H_
#define ATTNKIT_IO_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace attnkit {

// Default ceiling on the body of one array (8 GiB).
constexpr int64_t kDefaultNpyMaxBytes = int64_t{8} << 30;

struct NpyArray {
  std::vector<int64_t> shape;
  Tensor tensor;  // contiguous; bool arrays load as u8
  // The file's dtype when it was converted on load: "float64" (to float32,
  // rounded to nearest) or "int64" (to int32, range-checked); "" otherwise.
  std::string converted_from;
};

// Parses a whole .npy file held in memory; `source` names it in errors.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view source,
                                  int64_t max_bytes = kDefaultNpyMaxBytes);
absl::StatusOr<NpyArray> ReadNpy(const std::string& path, int64_t max_bytes = kDefaultNpyMaxBytes);

// Serialises a float32, float16, int32 or uint8 view (any strides) in C order.
// bf16 is written as float32, since NumPy has no bfloat16.
absl::StatusOr<std::string> SerializeNpy(const TensorView& t);
// SerializeNpy, then written whole or not at all.
absl::Status WriteNpy(const std::string& path, const TensorView& t);

}  // namespace attnkit

#endif  // ATTNKIT_IO_NPY_H_

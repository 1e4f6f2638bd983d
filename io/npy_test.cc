#include "io/npy.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/config_io.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// A .npy file with the given header dict and body.
std::string Npy(const std::string& dict, const std::string& body, char major = 1) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + major + '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + body;
}

TEST(NpyTest, RoundTripsF32AndStridedViews) {
  float data[2][3] = {{1, 2, 3}, {4, 5, 6}};
  TensorView v = ContiguousView(data, DType::kF32, {2, 3});
  auto bytes = SerializeNpy(v);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size() % 64, 24u);  // 64-byte header + 24-byte body
  auto back = ParseNpy(*bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(static_cast<float*>(back->tensor.data())[4], 5.0f);
  // A transposed view is written in its logical (C) order.
  TensorView t = v;
  t.shape = {3, 2};
  t.strides = {1, 3};
  auto tb = ParseNpy(*SerializeNpy(t), "mem");
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(static_cast<float*>(tb->tensor.data())[1], 4.0f);
}

TEST(NpyTest, ReadsInt64AsInt32AndBoolAsU8) {
  const int64_t lengths[2] = {7, 3};
  auto a = ParseNpy(Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                        std::string(reinterpret_cast<const char*>(lengths), 16)),
                    "mem");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tensor.view().dtype, DType::kI32);
  EXPECT_EQ(static_cast<int32_t*>(a->tensor.data())[1], 3);
  auto m = ParseNpy(Npy("{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2), }",
                        std::string("\x01\x00", 2)),
                    "mem");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->tensor.view().dtype, DType::kU8);
}

TEST(NpyTest, ReadsFloat64AsFloat32AndSaysSo) {
  const double values[2] = {0.1, -3.0};
  auto a = ParseNpy(Npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                        std::string(reinterpret_cast<const char*>(values), sizeof(values))),
                    "mem");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tensor.view().dtype, DType::kF32);
  EXPECT_EQ(a->converted_from, "float64");
  EXPECT_EQ(static_cast<const float*>(a->tensor.data())[0], 0.1f);
  EXPECT_EQ(static_cast<const float*>(a->tensor.data())[1], -3.0f);
}

TEST(NpyTest, RefusesBadFilesWithTheReason) {
  const std::string body8(8, '\0');
  struct Case {
    std::string bytes, message;
  };
  const Case cases[] = {
      {"not a numpy file", "missing the \\x93NUMPY magic"},
      {Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", body8), "big-endian"},
      {Npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", body8),
       "dtype '<c8' is not supported"},
      {Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", body8), "Fortran-order"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", body8),
       "body has 8 bytes; shape (3) of f32 needs 12 (truncated)"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", body8),
       "body has 8 bytes; shape (1) of f32 needs 4"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 1000000), }",
           body8),
       "needs more than the"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", body8),
       "shape entry '-2' is not a size"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 2), }", body8),
       "rank 5 is more than the supported 4"},
      {Npy("{'fortran_order': False, 'shape': (2,), }", body8), "header has no 'descr' entry"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", body8, 9),
       "format version 9 is not supported"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "truncated header"},
  };
  for (const Case& c : cases) {
    auto a = ParseNpy(c.bytes, "f.npy");
    ASSERT_FALSE(a.ok()) << c.message;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("f.npy"));
  }
}

TEST(NpyTest, WritesWholeFilesOrNothing) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/out.npy";
  float x[3] = {1, 2, 3};
  ASSERT_TRUE(WriteNpy(path, ContiguousView(x, DType::kF32, {3})).ok());
  auto back = ReadNpy(path);
  ASSERT_TRUE(back.ok());
  // A write into a directory that does not exist fails and leaves nothing.
  const absl::Status s = WriteNpy(dir + "/missing/out.npy", ContiguousView(x, DType::kF32, {3}));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing/out.npy"));
  EXPECT_FALSE(ReadNpy(dir + "/missing/out.npy").ok());
  EXPECT_THAT(std::string(ReadNpy(dir + "/nope.npy").status().message()),
              HasSubstr("cannot open " + dir + "/nope.npy"));
}

// A file whose header claims a huge shape is refused from its header alone.
TEST(NpyTest, HugeShapeIsRefusedBeforeTheBodyIsRead) {
  const std::string path = ::testing::TempDir() + "/huge.npy";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1024), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  ASSERT_TRUE(WriteFileAtomically(path, bytes + header + std::string(4096, 'x')).ok());
  auto a = ReadNpy(path, int64_t{1} << 30);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted) << a.status();
  // Under the limit, a body the file size contradicts is refused unread.
  a = ReadNpy(path, int64_t{8} << 30);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("(truncated)"));
}

}  // namespace
}  // namespace attnkit

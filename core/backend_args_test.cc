// The checks between a problem and its tensors for paged, ragged and int8
// problems (core/backend.h): ValidateArgs (shapes, dtypes, present/absent
// tensors), ValidateHostIndexTensors (offsets and block table entries), the
// capability flags, and Forward running both before a backend sees a call.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/full_capabilities.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// Decode over a paged int8 pool: 2 sequences of 40 and 17 keys, pool
// [5, 16, G 2, d 8], block table [2, 3], scales [5, 16, 2].
AttentionProblem PagedInt8() {
  AttentionProblem p = BasicProblem(2, 4, 2, 1, 40, 8);
  p.kv_dtype = DType::kI8;
  p.page_size = 16;
  p.num_pages = 5;
  p.kv_lengths = {40, 17};
  return p;
}

// Ragged over packed f16 K/V: q_lengths {2, 0, 4}, kv_lengths {9, 4, 0};
// Q, O [6, 4, 8], LSE [4, 6], K, V [13, 2, 8], cu_seqlens [4].
AttentionProblem RaggedPacked() {
  AttentionProblem p = BasicProblem(3, 4, 2, 4, 9, 8);
  p.layout = Layout::kBTHD;
  p.kv_dtype = DType::kF16;
  p.q_lengths = {2, 0, 4};
  p.kv_lengths = {9, 4, 0};
  p.return_lse = true;
  return p;
}

// A view of the same storage with another shape (strides recomputed).
TensorView Reshaped(const TensorView& t, std::vector<int64_t> shape) {
  return ContiguousView(t.data, t.dtype, shape);
}

struct Edit {
  std::string what;
  std::function<void(AttentionArgs&)> edit;
  std::string message;
};

// Each edit of valid args must fail ValidateArgs with `message`.
void ExpectRejected(const AttentionProblem& p, const AttentionArgs& valid,
                    const std::vector<Edit>& edits) {
  ASSERT_TRUE(ValidateArgs(p, valid).ok()) << ValidateArgs(p, valid);
  for (const Edit& e : edits) {
    AttentionArgs a = valid;
    e.edit(a);
    const absl::Status s = ValidateArgs(p, a);
    ASSERT_FALSE(s.ok()) << e.what;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << e.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(e.message)) << e.what;
  }
}

TEST(BackendArgsTest, PagedInt8ShapesNameTheTensor) {
  const AttentionProblem p = PagedInt8();
  auto data = ProblemData::Random(p, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  Tensor dense_k = Tensor::Attention(DType::kI8, Layout::kBHTD, 2, 2, 40, 8).value();
  Tensor f32 = Tensor::Contiguous(DType::kF32, {5, 16, 2, 8}).value();
  ExpectRejected(
      p, data->args(),
      {
          {"dense K", [&](AttentionArgs& a) { a.k = dense_k.view(); }, "k has shape i8[2,2,40,8]"},
          {"dense K", [&](AttentionArgs& a) { a.k = dense_k.view(); },
           "the problem needs [5, 16, 2, 8]"},
          {"pool short a page", [](AttentionArgs& a) { a.v.shape[0] = 4; }, "v has shape"},
          {"float pool", [&](AttentionArgs& a) { a.k = f32.view(); },
           "k has dtype f32; the problem needs i8"},
          {"no k_scale", [](AttentionArgs& a) { a.k_scale = TensorView(); }, "k_scale is missing"},
          {"v_scale with d",
           [&](AttentionArgs& a) {
             a.v_scale = Reshaped(a.v_scale, {5, 16, 2, 1});
           },
           "v_scale has shape f32[5,16,2,1]"},
          {"v_scale with d",
           [&](AttentionArgs& a) {
             a.v_scale = Reshaped(a.v_scale, {5, 16, 2, 1});
           },
           "the problem needs [5, 16, 2]"},
          {"no table", [](AttentionArgs& a) { a.block_table = TensorView(); },
           "block_table is missing"},
          {"table one column short", [](AttentionArgs& a) { a.block_table.shape[1] = 2; },
           "block_table has shape i32[2,2]"},
          {"table as f32", [](AttentionArgs& a) { a.block_table.dtype = DType::kF32; },
           "block_table has dtype f32; the problem needs i32"},
          {"offsets in a dense batch", [&](AttentionArgs& a) { a.cu_seqlens_q = a.kv_lengths; },
           "cu_seqlens_q was given but the problem has q_lengths (ragged) off"},
          {"K offsets in a dense batch", [&](AttentionArgs& a) { a.cu_seqlens_k = a.kv_lengths; },
           "cu_seqlens_k was given but the problem has q_lengths with packed (not paged) K/V off"},
          {"output over the table", [](AttentionArgs& a) { a.o.data = a.block_table.data; },
           "an output tensor (o or lse) overlaps an input"},
      });
}

TEST(BackendArgsTest, RaggedShapesNameTheTensor) {
  const AttentionProblem p = RaggedPacked();
  auto data = ProblemData::Random(p, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  Tensor bhtd_q = Tensor::Attention(DType::kF32, Layout::kBTHD, 3, 4, 4, 8).value();
  Tensor table = Tensor::Contiguous(DType::kI32, {3, 1}).value();
  Tensor scale = Tensor::Contiguous(DType::kF32, {13, 2}).value();
  ExpectRejected(
      p, data->args(),
      {
          {"unpacked Q", [&](AttentionArgs& a) { a.q = bhtd_q.view(); },
           "q has shape f32[3,4,4,8]"},
          {"unpacked Q", [&](AttentionArgs& a) { a.q = bhtd_q.view(); },
           "the problem needs [6, 4, 8]"},
          {"O a token short", [](AttentionArgs& a) { a.o.shape[0] = 5; }, "o has shape"},
          {"LSE [B, H, Tq]",
           [](AttentionArgs& a) {
             a.lse = Reshaped(a.lse, {1, 4, 6});
           },
           "lse has shape"},
          {"LSE [total_q, H]",
           [](AttentionArgs& a) {
             a.lse = Reshaped(a.lse, {6, 4});
           },
           "the problem needs [4, 6]"},
          {"K a token long", [](AttentionArgs& a) { a.k.shape[0] = 14; },
           "the problem needs [13, 2, 8]"},
          {"no offsets", [](AttentionArgs& a) { a.cu_seqlens_q = TensorView(); },
           "cu_seqlens_q is missing"},
          {"offsets [B]", [](AttentionArgs& a) { a.cu_seqlens_q.shape[0] = 3; },
           "cu_seqlens_q has shape i32[3]"},
          {"no K offsets", [](AttentionArgs& a) { a.cu_seqlens_k = TensorView(); },
           "cu_seqlens_k is missing"},
          {"K offsets as f32", [](AttentionArgs& a) { a.cu_seqlens_k.dtype = DType::kF32; },
           "cu_seqlens_k has dtype f32; the problem needs i32"},
          {"a block table", [&](AttentionArgs& a) { a.block_table = table.view(); },
           "block_table was given but the problem has paged K/V (page_size) off"},
          {"scales for f16 K", [&](AttentionArgs& a) { a.k_scale = scale.view(); },
           "k_scale was given but the problem has int8 or fp8 K/V off"},
          {"LSE over the offsets", [](AttentionArgs& a) { a.lse.data = a.cu_seqlens_q.data; },
           "an output tensor (o or lse) overlaps an input"},
      });
}

// Ragged over a paged pool: K/V are the pool and there are no K offsets.
TEST(BackendArgsTest, RaggedPagedTakesThePoolAndNoKeyOffsets) {
  AttentionProblem p = RaggedPacked();
  p.page_size = 16;
  p.num_pages = 2;
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(data->cu_seqlens_k.view().empty());
  Tensor cu_k = Tensor::Contiguous(DType::kI32, {4}).value();
  Tensor packed = Tensor::Contiguous(DType::kF16, {13, 2, 8}).value();
  ExpectRejected(p, data->args(),
                 {
                     {"K offsets", [&](AttentionArgs& a) { a.cu_seqlens_k = cu_k.view(); },
                      "cu_seqlens_k was given"},
                     {"packed K", [&](AttentionArgs& a) { a.k = packed.view(); },
                      "the problem needs [2, 16, 2, 8]"},
                 });
}

// Dense int8: scales have K's shape without d, [B, G, Tk].
TEST(BackendArgsTest, DenseInt8ScalesAreKeyShaped) {
  AttentionProblem p = BasicProblem(2, 4, 2, 3, 7, 8);
  p.kv_dtype = DType::kI8;
  auto data = ProblemData::Random(p, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  Tensor long_scale = Tensor::Contiguous(DType::kF32, {2, 2, 8}).value();
  Tensor table = Tensor::Contiguous(DType::kI32, {2, 1}).value();
  ExpectRejected(
      p, data->args(),
      {
          {"scale a key long", [&](AttentionArgs& a) { a.k_scale = long_scale.view(); },
           "k_scale has shape f32[2,2,8]"},
          {"no v_scale", [](AttentionArgs& a) { a.v_scale = TensorView(); }, "v_scale is missing"},
          {"no block table either", [&](AttentionArgs& a) { a.block_table = table.view(); },
           "block_table was given"},
      });
}

int32_t* I32(const Tensor& t) { return static_cast<int32_t*>(t.data()); }

// Host index tensors must hold the problem's lengths and in-pool pages; the
// error names the entry, its value and the rule.
TEST(BackendArgsTest, HostIndexTensorsAreChecked) {
  {
    const AttentionProblem p = RaggedPacked();
    auto data = ProblemData::Random(p, 5);
    ASSERT_TRUE(data.ok());
    ASSERT_TRUE(ValidateHostIndexTensors(p, data->args()).ok());
    struct Case {
      const Tensor* t;
      int64_t index;
      int32_t value;
      std::string message;
    };
    const Case cases[] = {
        // cu_seqlens_q is {0, 2, 2, 6}, cu_seqlens_k {0, 9, 13, 13}.
        {&data->cu_seqlens_q, 0, 1,
         "cu_seqlens_q[0] (1) must be 0: 0, then the running sum "
         "of q_lengths"},
        {&data->cu_seqlens_q, 2, 3, "cu_seqlens_q[2] (3) must be 2"},
        {&data->cu_seqlens_q, 3, 7, "cu_seqlens_q[3] (7) must be 6"},
        {&data->cu_seqlens_k, 3, 12,
         "cu_seqlens_k[3] (12) must be 13: 0, then the running sum of kv_lengths"},
        {&data->kv_lengths, 1, 3,
         "kv_lengths tensor[1] (3) differs from the problem's kv_lengths[1] (4)"},
    };
    for (const Case& c : cases) {
      const int32_t saved = I32(*c.t)[c.index];
      I32(*c.t)[c.index] = c.value;
      const absl::Status s = ValidateHostIndexTensors(p, data->args());
      I32(*c.t)[c.index] = saved;
      ASSERT_FALSE(s.ok()) << c.message;
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    }
  }
  const AttentionProblem p = PagedInt8();
  auto data = ProblemData::Random(p, 6);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(ValidateHostIndexTensors(p, data->args()).ok());
  // Table [2, 3]: sequence 0 uses all 3 entries, sequence 1 (17 keys) 2.
  int32_t* table = I32(data->block_table);
  ASSERT_EQ(table[5], -1);
  table[5] = 99;  // past sequence 1's last page: never read, not checked
  EXPECT_TRUE(ValidateHostIndexTensors(p, data->args()).ok());
  struct Case {
    int64_t at;
    int32_t value;
    std::string message;
  };
  const Case cases[] = {
      {4, 5, "block_table[1, 1] (5) must be a page of the pool, in [0, num_pages (5))"},
      {2, -1, "block_table[0, 2] (-1) must be a page of the pool"},
      {0, 1 << 30, "block_table[0, 0] (1073741824)"},
  };
  for (const Case& c : cases) {
    const int32_t saved = table[c.at];
    table[c.at] = c.value;
    const absl::Status s = ValidateHostIndexTensors(p, data->args());
    table[c.at] = saved;
    ASSERT_FALSE(s.ok()) << c.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

// A host backend that records whether ForwardImpl ran.
class Recorder : public Backend {
 public:
  explicit Recorder(Capabilities caps) : caps_(std::move(caps)) {}
  std::string Name() const override { return "recorder"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return caps_; }
  int calls = 0;

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    ++calls;
    return absl::OkStatus();
  }

 private:
  Capabilities caps_;
};

// Forward checks the block table before the backend runs: a kernel never
// sees a page outside the pool.
TEST(BackendArgsTest, ForwardRefusesAnOutOfPoolPageBeforeTheBackendRuns) {
  const AttentionProblem p = PagedInt8();
  auto data = ProblemData::Random(p, 7);
  ASSERT_TRUE(data.ok());
  Recorder backend(FullCapabilities());
  ASSERT_TRUE(backend.Forward(p, data->args()).ok());
  EXPECT_EQ(backend.calls, 1);
  I32(data->block_table)[1] = 5;
  const absl::Status s = backend.Forward(p, data->args());
  EXPECT_THAT(std::string(s.message()), HasSubstr("block_table[0, 1] (5)"));
  EXPECT_EQ(backend.calls, 1);
}

// Paging, ragged batches and int8 are capabilities a backend claims or not;
// refusals name the feature.
TEST(BackendArgsTest, CapabilitiesCoverPagedRaggedAndInt8) {
  const Capabilities full = FullCapabilities();
  AttentionProblem both = RaggedPacked();
  both.page_size = 16;
  both.num_pages = 2;
  both.kv_dtype = DType::kI8;
  EXPECT_TRUE(CheckCapabilities(full, both).ok()) << CheckCapabilities(full, both);
  EXPECT_THAT(full.Describe(), HasSubstr("paged_kv, ragged"));
  EXPECT_THAT(full.Describe(), HasSubstr("kv dtypes: f32, f16, bf16, i8"));

  Capabilities no_paging = full;
  no_paging.paged_kv = false;
  absl::Status s = CheckCapabilities(no_paging, PagedInt8());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("paged K/V (page_size) is not supported"));
  EXPECT_TRUE(CheckCapabilities(no_paging, RaggedPacked()).ok());

  Capabilities no_ragged = full;
  no_ragged.ragged = false;
  s = CheckCapabilities(no_ragged, RaggedPacked());
  EXPECT_THAT(std::string(s.message()), HasSubstr("ragged batches (q_lengths) is not supported"));
  EXPECT_TRUE(CheckCapabilities(no_ragged, PagedInt8()).ok());

  Capabilities no_int8 = full;
  no_int8.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  s = CheckCapabilities(no_int8, PagedInt8());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("kv_dtype i8 is not supported; supported: f32, f16, bf16"));
  // Q and O are never int8, whatever a backend claims.
  EXPECT_FALSE(std::find(full.dtypes.begin(), full.dtypes.end(), DType::kI8) != full.dtypes.end());
}

// Ev != E: V and O take value_head_dim (dense, paged and ragged shapes), K
// and Q keep head_dim; the tensors' names say which is wrong. A backend
// claims Ev != E or refuses it by name; Ev must lie in its head dims too,
// and its backward says so on its own.
TEST(BackendArgsTest, ValueHeadDimShapesVAndO) {
  AttentionProblem p = PagedInt8();
  p.value_head_dim = 24;
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs a = data->args();
  EXPECT_EQ(a.v.shape[3], 24);
  EXPECT_EQ(a.k.shape[3], 8);
  EXPECT_EQ(a.o.shape[3], 24);
  ExpectRejected(p, a,
                 {{"v with K's head dim", [&](AttentionArgs& x) { x.v = a.k; },
                   "the problem needs [5, 16, 2, 24]"},
                  {"o with Q's head dim", [&](AttentionArgs& x) { x.o.shape[3] = 8; },
                   "the problem needs [2, 4, 1, 24]"}});
  AttentionProblem r = RaggedPacked();
  r.value_head_dim = 5;
  auto rdata = ProblemData::Random(r, 3);
  ASSERT_TRUE(rdata.ok()) << rdata.status();
  EXPECT_TRUE(ValidateArgs(r, rdata->args()).ok()) << ValidateArgs(r, rdata->args());
  EXPECT_EQ(rdata->args().v.shape[2], 5);
  EXPECT_EQ(rdata->args().o.shape[2], 5);

  Capabilities c = FullCapabilities();
  EXPECT_TRUE(CheckCapabilities(c, p).ok());
  EXPECT_THAT(c.Describe(), HasSubstr("value_head_dim"));
  c.max_head_dim = 16;
  EXPECT_THAT(std::string(CheckCapabilities(c, p).message()),
              HasSubstr("value_head_dim 24 is not supported; supported: 1..16"));
  c = FullCapabilities();
  c.value_head_dim = false;
  const absl::Status s = CheckCapabilities(c, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("value_head_dim (24) != head_dim (8) is not supported"));
  AttentionProblem train = BasicProblem(1, 2, 2, 4, 4, 8);
  train.value_head_dim = 16;
  train.return_lse = true;
  c = FullCapabilities();
  c.backward = FullBackwardCapabilities();
  EXPECT_THAT(std::string(CheckBackwardCapabilities(c, train).message()),
              HasSubstr("backward with value_head_dim != head_dim (Ev != E) is not supported"));
  c.backward.value_head_dim = true;
  EXPECT_TRUE(CheckBackwardCapabilities(c, train).ok());
}

}  // namespace
}  // namespace attnkit

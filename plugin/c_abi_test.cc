// The plugin C ABI carries paged K/V, ragged batches and int8 K/V both ways
// (plugin/c_abi.h), and a struct from a build before them (a smaller
// struct_size) reads as dense, float and unclaimed.
#include "plugin/c_abi.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "core/full_capabilities.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// Ragged over a paged int8 pool: every new field set.
AttentionProblem PagedRaggedInt8() {
  AttentionProblem p = BasicProblem(3, 4, 2, 5, 40, 8);
  p.layout = Layout::kBTHD;
  p.kv_dtype = DType::kI8;
  p.dtype = DType::kBF16;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 32;
  p.num_pages = 4;
  p.q_lengths = {5, 0, 1};
  p.kv_lengths = {40, 3, 0};
  p.return_lse = true;
  p.name = "serving";
  return p;
}

TEST(CAbiTest, ProblemRoundTripsPagedRaggedInt8) {
  const AttentionProblem p = PagedRaggedInt8();
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  const attnkit_problem c = ProblemToC(p);
  EXPECT_EQ(c.kv_dtype, ATTNKIT_I8);
  EXPECT_EQ(c.page_size, 32);
  EXPECT_EQ(c.num_pages, 4);
  ASSERT_EQ(c.num_q_lengths, 3);
  EXPECT_EQ(c.q_lengths, p.q_lengths.data()) << "borrowed, not copied";
  auto back = ProblemFromC(c);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Id(), p.Id());
  EXPECT_EQ(back->kv_dtype, DType::kI8);
  EXPECT_EQ(back->page_size, 32);
  EXPECT_EQ(back->num_pages, 4);
  EXPECT_EQ(back->q_lengths, p.q_lengths);
  EXPECT_EQ(back->kv_lengths, p.kv_lengths);
  // A dense problem has no q_lengths pointer.
  const attnkit_problem dense = ProblemToC(BasicProblem(1, 2, 1, 3, 3, 8));
  EXPECT_EQ(dense.q_lengths, nullptr);
  EXPECT_EQ(dense.num_q_lengths, 0);
  EXPECT_EQ(dense.page_size, 0);
}

TEST(CAbiTest, BadQLengthsAndDTypesAreRefusedByName) {
  const AttentionProblem p = PagedRaggedInt8();
  attnkit_problem c = ProblemToC(p);
  c.num_q_lengths = -1;
  EXPECT_THAT(std::string(ProblemFromC(c).status().message()),
              HasSubstr("num_q_lengths (-1) must be 0, or the length of a non-null q_lengths"));
  c = ProblemToC(p);
  c.q_lengths = nullptr;
  EXPECT_THAT(std::string(ProblemFromC(c).status().message()), HasSubstr("num_q_lengths (3)"));
  c = ProblemToC(p);
  c.kv_dtype = ATTNKIT_F8E5M2 + 1;  // past the last dtype
  EXPECT_THAT(std::string(ProblemFromC(c).status().message()), HasSubstr("kv_dtype"));
}

// A problem struct from a host built before 0.25 ends before page_size: the
// plugin side (attnkit_sdk CopyIn) zero-fills the rest, a dense problem.
TEST(CAbiTest, OlderProblemStructReadsAsDense) {
  AttentionProblem p = PagedRaggedInt8();
  p.kv_dtype = DType::kF32;
  attnkit_problem c = ProblemToC(p);
  c.struct_size = offsetof(attnkit_problem, page_size);
  const attnkit_problem in = attnkit_sdk::internal::CopyIn(&c);
  EXPECT_EQ(in.struct_size, sizeof(attnkit_problem));
  auto back = ProblemFromC(in);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->is_paged());
  EXPECT_FALSE(back->is_ragged());
  EXPECT_EQ(back->num_pages, 0);
  EXPECT_EQ(back->kv_lengths, p.kv_lengths) << "the fields before page_size arrive";
}

TEST(CAbiTest, ArgsRoundTripScalesTableAndOffsets) {
  AttentionProblem p = PagedRaggedInt8();
  auto data = ProblemData::Random(p, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs a = data->args();
  ASSERT_FALSE(a.k_scale.empty() || a.v_scale.empty() || a.block_table.empty() ||
               a.cu_seqlens_q.empty());
  const attnkit_args c = ArgsToC(a);
  EXPECT_EQ(c.k.dtype, ATTNKIT_I8);
  EXPECT_EQ(c.block_table.dtype, ATTNKIT_I32);
  EXPECT_EQ(c.block_table.rank, 2);
  EXPECT_EQ(c.cu_seqlens_k.data, nullptr) << "paged: no K offsets";
  auto back = ArgsFromC(c);
  ASSERT_TRUE(back.ok()) << back.status();
  auto same = [](const TensorView& x, const TensorView& y) {
    return x.data == y.data && x.dtype == y.dtype && x.rank == y.rank && x.shape == y.shape &&
           x.strides == y.strides;
  };
  EXPECT_TRUE(same(back->k, a.k));
  EXPECT_TRUE(same(back->k_scale, a.k_scale));
  EXPECT_TRUE(same(back->v_scale, a.v_scale));
  EXPECT_TRUE(same(back->block_table, a.block_table));
  EXPECT_TRUE(same(back->cu_seqlens_q, a.cu_seqlens_q));
  EXPECT_TRUE(back->cu_seqlens_k.empty());
  EXPECT_TRUE(ValidateArgs(p, *back).ok()) << ValidateArgs(p, *back);

  // Packed K/V: the K offsets cross too.
  p.page_size = p.num_pages = 0;
  data = ProblemData::Random(p, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  back = ArgsFromC(ArgsToC(data->args()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(same(back->cu_seqlens_k, data->args().cu_seqlens_k));
  EXPECT_TRUE(ValidateArgs(p, *back).ok()) << ValidateArgs(p, *back);

  // A bad dtype in a new tensor is refused by its name.
  attnkit_args bad = ArgsToC(data->args());
  bad.k_scale.dtype = 17;
  EXPECT_THAT(std::string(ArgsFromC(bad).status().message()), HasSubstr("k_scale"));
  bad = ArgsToC(data->args());
  bad.cu_seqlens_k.rank = 5;
  EXPECT_THAT(std::string(ArgsFromC(bad).status().message()), HasSubstr("cu_seqlens_k: rank 5"));
}

// Args from a pre-0.25 host end before k_scale: the new tensors are absent.
TEST(CAbiTest, OlderArgsStructHasNoNewTensors) {
  AttentionProblem p = PagedRaggedInt8();
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok());
  attnkit_args c = ArgsToC(data->args());
  c.struct_size = offsetof(attnkit_args, k_scale);
  auto back = ArgsFromC(attnkit_sdk::internal::CopyIn(&c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->q.empty());
  EXPECT_TRUE(back->k_scale.empty() && back->v_scale.empty() && back->block_table.empty() &&
              back->cu_seqlens_q.empty() && back->cu_seqlens_k.empty());
}

TEST(CAbiTest, CapsRoundTripPagedRaggedAndInt8) {
  const Capabilities full = FullCapabilities();
  const attnkit_caps c = CapsToC(full);
  EXPECT_EQ(c.paged_kv, 1);
  EXPECT_EQ(c.ragged, 1);
  EXPECT_NE(c.kv_dtypes & (1u << ATTNKIT_I8), 0u);
  EXPECT_EQ(c.dtypes & (1u << ATTNKIT_I8), 0u);
  const Capabilities back = CapsFromC(c);
  EXPECT_TRUE(back.paged_kv);
  EXPECT_TRUE(back.ragged);
  EXPECT_EQ(back.kv_dtypes, full.kv_dtypes);
  EXPECT_EQ(back.Describe(), full.Describe());
  for (bool paged : {false, true}) {
    for (bool ragged : {false, true}) {
      Capabilities caps = full;
      caps.paged_kv = paged;
      caps.ragged = ragged;
      caps.kv_dtypes = {DType::kBF16};
      const Capabilities rt = CapsFromC(CapsToC(caps));
      EXPECT_EQ(rt.paged_kv, paged);
      EXPECT_EQ(rt.ragged, ragged);
      EXPECT_EQ(rt.kv_dtypes, caps.kv_dtypes);
    }
  }
}

// Caps cross as far as both sides' struct_size reaches (attnkit_sdk
// CopyOut): between a 0.25 build and an older one, the zeroed paged_kv and
// ragged stay 0, so neither is claimed.
TEST(CAbiTest, OlderPluginCapsClaimNeitherPagingNorRagged) {
  attnkit_caps host;
  std::memset(&host, 0, sizeof(host));
  host.struct_size = offsetof(attnkit_caps, paged_kv);
  attnkit_sdk::internal::CopyOut(CapsToC(FullCapabilities()), &host);
  EXPECT_EQ(host.struct_size, offsetof(attnkit_caps, paged_kv));
  EXPECT_EQ(host.lse, 1) << "fields before paged_kv arrive";
  const Capabilities caps = CapsFromC(host);
  EXPECT_FALSE(caps.paged_kv);
  EXPECT_FALSE(caps.ragged);
}

}  // namespace
}  // namespace attnkit

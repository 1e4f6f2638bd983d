// RaggedSequences: a ragged batch as batch-1 problems whose tensors are
// views into the packed ones (core/ragged.h).
#include "core/ragged.h"

#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

// 4 sequences: 2 queries over 9 keys, none over 4 (skipped), 5 over none
// (fully blocked), 1 over 3. H 4, G 2, d 8; packed Q [8, 4, 8], K [16, 2, 8].
AttentionProblem Ragged() {
  AttentionProblem p = BasicProblem(4, 4, 2, 5, 9, 8);
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {2, 0, 5, 1};
  p.kv_lengths = {9, 4, 0, 3};
  p.return_lse = true;
  return p;
}

const char* Byte(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.data()) + elements * DTypeSize(t.view().dtype);
}

TEST(RaggedTest, SequencesAreViewsAtTheirOffsets) {
  AttentionProblem p = Ragged();
  p.kv_dtype = DType::kI8;  // scales [total_k, G] are split too
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs a = data->args();
  ASSERT_TRUE(ValidateArgs(p, a).ok());
  const int64_t H = 4, G = 2, d = 8, total_q = 8;
  const std::vector<SequenceCall> calls = RaggedSequences(p, a);
  // Sequence 1 has no queries: it is skipped, but its keys still shift the
  // K offsets of the sequences after it.
  ASSERT_EQ(calls.size(), 3u);
  // Sequence 2 has no keys: its (never read) K/V views start at row 0, so
  // that such a sequence placed last never points past the packed K/V.
  const int64_t want_index[] = {0, 2, 3}, want_q[] = {0, 2, 7}, want_k[] = {0, 0, 13};
  for (size_t n = 0; n < calls.size(); ++n) {
    const SequenceCall& c = calls[n];
    const int64_t b = want_index[n];
    SCOPED_TRACE(b);
    EXPECT_EQ(c.index, b);
    EXPECT_EQ(c.q_offset, want_q[n]);
    const AttentionProblem& s = c.problem;
    EXPECT_EQ(s.batch, 1);
    EXPECT_EQ(s.q_len, p.q_lengths[b]);
    EXPECT_FALSE(s.is_ragged());
    EXPECT_EQ(s.mask_params().q_len, p.q_lengths[b]) << "the diagonal aligns per sequence";
    // Each sequence is a valid dense problem and its views pass ValidateArgs.
    EXPECT_TRUE(ValidateProblem(s).ok()) << ValidateProblem(s);
    EXPECT_TRUE(ValidateArgs(s, c.args).ok()) << ValidateArgs(s, c.args);
    // Q and O: [1, H, nq, d] at token q_offset, token-major strides.
    const int64_t nq = p.q_lengths[b];
    EXPECT_EQ(c.args.q.data, Byte(data->q, want_q[n] * H * d));
    EXPECT_EQ(c.args.o.data, Byte(data->o, want_q[n] * H * d));
    EXPECT_EQ(c.args.q.shape, (std::array<int64_t, 4>{1, H, nq, d}));
    EXPECT_EQ(c.args.q.strides[1], d);
    EXPECT_EQ(c.args.q.strides[2], H * d);
    // LSE [H, total_q] -> [1, H, nq]: column q_offset, row stride total_q.
    EXPECT_EQ(c.args.lse.data, Byte(data->lse, want_q[n]));
    EXPECT_EQ(c.args.lse.shape[2], nq);
    EXPECT_EQ(c.args.lse.strides[1], total_q);
    // K, V and their scales at token cu_seqlens_k[b].
    EXPECT_EQ(c.args.k.data, Byte(data->k, want_k[n] * G * d));
    EXPECT_EQ(c.args.v.data, Byte(data->v, want_k[n] * G * d));
    EXPECT_EQ(c.args.k_scale.data, Byte(data->k_scale, want_k[n] * G));
    EXPECT_EQ(c.args.v_scale.data, Byte(data->v_scale, want_k[n] * G));
    EXPECT_EQ(c.args.k.strides[2], G * d);
    EXPECT_TRUE(c.args.block_table.empty());
    EXPECT_TRUE(c.args.cu_seqlens_q.empty() && c.args.cu_seqlens_k.empty());
  }
  // Element (token 7, head 3, channel 5) of the packed Q is sequence 3's
  // query 0 of head 3.
  EXPECT_EQ(static_cast<const char*>(calls[2].args.q.data) + calls[2].args.q.Offset(0, 3, 0, 5) * 4,
            Byte(data->q, (7 * H + 3) * d + 5));
  // Sequence 0 and 3 have keys: kv_len is theirs and no kv_lengths remain.
  EXPECT_EQ(calls[0].problem.kv_len, 9);
  EXPECT_FALSE(calls[0].problem.has_kv_lengths());
  EXPECT_TRUE(calls[0].args.kv_lengths.empty());
  EXPECT_EQ(calls[2].problem.kv_len, 3);
}

// A sequence without keys becomes kv_len 1 with kv_lengths {0}: its rows are
// fully blocked (zeros, LSE -inf), and its kv_lengths view reads the 0.
TEST(RaggedTest, SequenceWithoutKeysIsFullyBlocked) {
  const AttentionProblem p = Ragged();
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok()) << data.status();
  const std::vector<SequenceCall> calls = RaggedSequences(p, data->args());
  ASSERT_EQ(calls.size(), 3u);
  const SequenceCall& empty = calls[1];
  ASSERT_EQ(empty.index, 2);
  EXPECT_EQ(empty.problem.kv_len, 1);
  EXPECT_EQ(empty.problem.kv_lengths, (std::vector<int64_t>{0}));
  ASSERT_FALSE(empty.args.kv_lengths.empty());
  EXPECT_EQ(empty.args.kv_lengths.shape[0], 1);
  EXPECT_EQ(*static_cast<const int32_t*>(empty.args.kv_lengths.data), 0);
  EXPECT_EQ(empty.args.kv_lengths.data, Byte(data->kv_lengths, 2));
  EXPECT_TRUE(ValidateHostIndexTensors(empty.problem, empty.args).ok());
  EXPECT_EQ(CountVisiblePairs(empty.problem), 0);
}

// Over a paged pool the sequences keep the pool and take their row of the
// block table; there are no packed K offsets.
TEST(RaggedTest, PagedSequencesKeepThePoolAndTheirTableRow) {
  AttentionProblem p = Ragged();
  p.page_size = 16;
  p.num_pages = 3;
  auto data = ProblemData::Random(p, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs a = data->args();
  ASSERT_TRUE(ValidateArgs(p, a).ok()) << ValidateArgs(p, a);
  ASSERT_TRUE(a.cu_seqlens_k.empty());
  const std::vector<SequenceCall> calls = RaggedSequences(p, a);
  ASSERT_EQ(calls.size(), 3u);
  for (const SequenceCall& c : calls) {
    SCOPED_TRACE(c.index);
    EXPECT_EQ(c.args.k.data, a.k.data);
    EXPECT_EQ(c.args.v.data, a.v.data);
    EXPECT_EQ(c.args.k.shape, a.k.shape);
    EXPECT_TRUE(c.problem.is_paged());
    EXPECT_EQ(c.problem.num_pages, 3);
    EXPECT_EQ(c.args.block_table.data, Byte(data->block_table, c.index * p.max_pages()));
    EXPECT_EQ(c.args.block_table.shape[0], 1);
    EXPECT_EQ(c.args.block_table.shape[1], c.problem.max_pages());
    EXPECT_TRUE(ValidateArgs(c.problem, c.args).ok()) << ValidateArgs(c.problem, c.args);
    EXPECT_TRUE(ValidateHostIndexTensors(c.problem, c.args).ok())
        << ValidateHostIndexTensors(c.problem, c.args);
  }
}

}  // namespace
}  // namespace attnkit

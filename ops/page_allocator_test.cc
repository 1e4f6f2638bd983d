// The page allocator (allocate, share, release, reference counts, running
// out) and the block tables over it (grow, shrink, fork with copy-on-write of
// a shared partially filled page).
#include "ops/page_allocator.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/block_tables.h"

namespace attnkit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PageAllocatorTest, AllocatesLowestFirstAndReusesFreedPages) {
  auto a = PageAllocator::Create(4);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->num_pages(), 4);
  EXPECT_EQ(a->num_free(), 4);
  auto first = a->Allocate(3);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(*first, ElementsAre(0, 1, 2));
  EXPECT_EQ(a->num_free(), 1);
  for (int32_t p : *first) EXPECT_EQ(a->refcount(p), 1);
  EXPECT_EQ(a->refcount(3), 0);
  ASSERT_TRUE(a->Release(1).ok());
  EXPECT_EQ(a->refcount(1), 0);
  EXPECT_EQ(a->num_free(), 2);
  auto again = a->Allocate(1);
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(*again, ElementsAre(1));  // the most recently freed page
  auto none = a->Allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(PageAllocatorTest, SharedPagesAreFreedByTheLastHolder) {
  auto a = PageAllocator::Create(2);
  ASSERT_TRUE(a.ok());
  const int32_t p = (*a->Allocate(1))[0];
  ASSERT_TRUE(a->Share(p).ok());
  ASSERT_TRUE(a->Share(p).ok());
  EXPECT_EQ(a->refcount(p), 3);
  EXPECT_TRUE(a->shared(p));
  ASSERT_TRUE(a->Release(p).ok());
  ASSERT_TRUE(a->Release(p).ok());
  EXPECT_FALSE(a->shared(p));
  EXPECT_EQ(a->num_free(), 1);
  ASSERT_TRUE(a->Release(p).ok());
  EXPECT_EQ(a->num_free(), 2);
}

TEST(PageAllocatorTest, ExhaustionAndMisuseAreErrorsNotCrashes) {
  auto a = PageAllocator::Create(3);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->Allocate(2).ok());
  const absl::Status s = a->Allocate(2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("2 needed, 1 free of 3"));
  EXPECT_EQ(a->num_free(), 1);                                             // all or nothing
  EXPECT_EQ(a->Release(2).code(), absl::StatusCode::kFailedPrecondition);  // free
  EXPECT_THAT(std::string(a->Share(2).message()), HasSubstr("page 2: the page is free"));
  EXPECT_EQ(a->Release(7).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a->Share(-1).message()), HasSubstr("num_pages (3)"));
  EXPECT_EQ(a->refcount(7), 0);
  EXPECT_THAT(std::string(PageAllocator::Create(0).status().message()), HasSubstr("num_pages (0)"));
}

// The i32 table row b as the kernels read it: the first n entries.
std::vector<int32_t> Row(const BlockTables& t, int64_t b, int64_t n) {
  const TensorView v = t.view(n);
  std::vector<int32_t> row;
  for (int64_t j = 0; j < n; ++j)
    row.push_back(static_cast<const int32_t*>(v.data)[v.Offset(b, j)]);
  return row;
}

TEST(BlockTablesTest, GrowTakesPagesAsTokensArriveAndShrinkReturnsThem) {
  auto t = BlockTables::Create(2, 16, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->PagesToGrow(0, 0, 1), 1);
  EXPECT_EQ(t->PagesToGrow(0, 0, 17), 2);
  ASSERT_TRUE(t->Grow({0, 0}, 17).ok());  // 2 pages each
  EXPECT_THAT(t->pages(0), ElementsAre(0, 1));
  EXPECT_THAT(t->pages(1), ElementsAre(2, 3));
  EXPECT_EQ(t->page(1, 16), 3);
  EXPECT_EQ(t->PagesToGrow(0, 17, 15), 0);  // fits in the second page
  ASSERT_TRUE(t->Grow({17, 17}, 15).ok());
  EXPECT_EQ(t->allocator().num_free(), 4);
  ASSERT_TRUE(t->Grow({32, 32}, 1).ok());
  EXPECT_THAT(Row(*t, 0, 3), ElementsAre(0, 1, 4));
  EXPECT_THAT(Row(*t, 1, 3), ElementsAre(2, 3, 5));
  EXPECT_EQ(t->view(3).strides[0], 8);  // rows num_pages apart
  t->Shrink(0, 16);
  EXPECT_THAT(t->pages(0), ElementsAre(0));
  EXPECT_THAT(Row(*t, 0, 3), ElementsAre(0, 0, 0));  // dropped entries are 0
  EXPECT_EQ(t->allocator().num_free(), 4);
}

TEST(BlockTablesTest, RunningOutChangesNothingAndNamesThePages) {
  auto t = BlockTables::Create(2, 16, 3);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->Grow({0, 0}, 10).ok());                  // one page each, one free
  const absl::Status s = t->Grow({10, 10}, 10).status();  // needs 2
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("appending 10 tokens to 2 sequences needs 2 new pages of 16 tokens, 1 of "
                        "3 are free"));
  EXPECT_THAT(t->pages(0), ElementsAre(0));
  EXPECT_THAT(t->pages(1), ElementsAre(1));
  EXPECT_EQ(t->allocator().num_free(), 1);
}

// Fork shares full pages and the partial last page; the next append to a
// sequence whose partial last page is shared copies that page first.
TEST(BlockTablesTest, ForkSharesPagesAndCopiesAPartialOneOnWrite) {
  auto t = BlockTables::Create(3, 16, 8);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->Grow({0, 0, 0}, 20).ok());  // pages 0 1 | 2 3 | 4 5
  t->Fork(0, 1, 20);                         // 1 drops 2, 3 and shares 0, 1
  EXPECT_THAT(t->pages(1), ElementsAre(0, 1));
  EXPECT_EQ(t->allocator().refcount(0), 2);
  EXPECT_EQ(t->allocator().refcount(1), 2);
  EXPECT_EQ(t->allocator().num_free(), 4);  // 2, 3 came back
  t->Fork(0, 2, 16);                        // a full page only
  EXPECT_THAT(t->pages(2), ElementsAre(0));
  EXPECT_EQ(t->allocator().refcount(0), 3);
  EXPECT_EQ(t->allocator().num_free(), 6);

  // Sequence 0 (20 tokens, last page 1 shared and partial) copies page 1;
  // sequence 1, then its only holder, writes page 1 in place; sequence 2 (16
  // tokens) starts a new page.
  EXPECT_EQ(t->PagesToGrow(0, 20, 1), 1);
  EXPECT_EQ(t->PagesToGrow(1, 20, 1), 1);  // alone, it would copy
  EXPECT_EQ(t->PagesToGrow(2, 16, 1), 1);
  EXPECT_EQ(t->PagesToGrowAll({20, 20, 16}, 1), 2);
  auto copies = t->Grow({20, 20, 16}, 1);
  ASSERT_TRUE(copies.ok()) << copies.status();
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].seq, 0);
  EXPECT_EQ((*copies)[0].from, 1);
  EXPECT_EQ((*copies)[0].rows, 4);
  EXPECT_EQ(t->pages(0)[1], (*copies)[0].to);
  EXPECT_EQ(t->pages(1)[1], 1);
  EXPECT_EQ(t->allocator().refcount(1), 1);
  EXPECT_EQ(t->allocator().refcount((*copies)[0].to), 1);
  EXPECT_EQ(t->pages(0)[0], 0);  // full pages stay shared
  EXPECT_EQ(t->allocator().refcount(0), 3);
  EXPECT_EQ(t->allocator().num_free(), 4);
  EXPECT_EQ(t->pages(2).size(), 2u);
  // A page held by one sequence again is written in place.
  EXPECT_EQ(t->PagesToGrow(0, 21, 1), 0);
  // Releasing every holder frees the shared page.
  for (int64_t b = 0; b < 3; ++b) t->Shrink(b, 0);
  EXPECT_EQ(t->allocator().num_free(), 8);
}

// The room check counts the copies Grow makes, not one per holder: two
// sequences sharing a partial page need one page between them, not two.
TEST(BlockTablesTest, LastHolderOfASharedPageNeedsNoCopy) {
  auto t = BlockTables::Create(2, 16, 2);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->Grow({0, 0}, 5).ok());
  t->Fork(0, 1, 5);  // both hold page 0, 5 rows filled; one page free
  ASSERT_EQ(t->allocator().num_free(), 1);
  EXPECT_TRUE(t->CheckRoom({5, 5}, 1).ok());
  auto copies = t->Grow({5, 5}, 1);
  ASSERT_TRUE(copies.ok()) << copies.status();
  EXPECT_EQ(copies->size(), 1u);
  EXPECT_EQ(t->allocator().num_free(), 0);
  EXPECT_NE(t->pages(0)[0], t->pages(1)[0]);
  EXPECT_EQ(t->CheckRoom({6, 6}, 11).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace attnkit

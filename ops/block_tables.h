// The block tables of a paged KV cache: for each sequence of the batch, the
// pool pages that hold its tokens in order (token t is row t % page_size of
// pages(b)[t / page_size]), kept over one PageAllocator, and the same lists
// as the i32 table [B, max_pages] AttentionArgs::block_table reads. Only
// page numbers live here; the K/V rows are the cache's (ops/kv_cache.h).
//
// Invariant the cache keeps: sequence b of length L holds exactly
// ceil(L / page_size) pages.
//
// Sharing: Fork gives a sequence another's first pages (a common prompt
// prefix) by reference count, full pages and the partially filled last one
// alike. A shared page is never written: the first Grow of a sequence whose
// last page is shared and partially filled copies that page (copy-on-write)
// and writes the copy, so neither sequence sees the other's new tokens.
#ifndef ATTNKIT_OPS_BLOCK_TABLES_H_
#define ATTNKIT_OPS_BLOCK_TABLES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "ops/page_allocator.h"

namespace attnkit {

class BlockTables {
 public:
  BlockTables() = default;
  // Empty tables for `batch` sequences over a pool of `num_pages` pages.
  // InvalidArgument naming the value when batch < 1 or num_pages is outside
  // [1, INT32_MAX]; page_size is the caller's to check.
  static absl::StatusOr<BlockTables> Create(int64_t batch, int64_t page_size, int64_t num_pages);

  // A page's rows [0, rows) to copy into a fresh page before sequence `seq`
  // writes its next token there (copy-on-write of a shared page).
  struct PageCopy {
    int64_t seq;
    int32_t from, to;
    int64_t rows;
  };
  // Pages sequence b must newly take to grow from `length` tokens by
  // `tokens`: the pages its new tokens reach past its last one, plus one for
  // the copy of a shared, partially filled last page.
  int64_t PagesToGrow(int64_t b, int64_t length, int64_t tokens) const;
  // The pages Grow(lengths, tokens) takes: PagesToGrow summed, less the
  // copies it skips because the last holder of a shared page writes it in
  // place once every other holder has copied away.
  int64_t PagesToGrowAll(const std::vector<int64_t>& lengths, int64_t tokens) const;
  // OK when the free pages cover every sequence b growing from lengths[b]
  // by `tokens`; else ResourceExhausted naming the pages needed and free.
  absl::Status CheckRoom(const std::vector<int64_t>& lengths, int64_t tokens) const;
  // Every sequence b grows from lengths[b] by `tokens`: all or nothing.
  // CheckRoom's error, with nothing changed, or appends the pages and returns the copies the caller
  // must make (before writing the new rows) for shared last pages it replaced.
  absl::StatusOr<std::vector<PageCopy>> Grow(const std::vector<int64_t>& lengths, int64_t tokens);
  // Releases sequence b's pages past the first ceil(length / page_size).
  void Shrink(int64_t b, int64_t length);
  // Sequence dst releases its pages, then shares the first
  // ceil(tokens / page_size) pages of src (tokens <= src's length is the
  // caller's to check; src != dst).
  void Fork(int64_t src, int64_t dst, int64_t tokens);

  // The page holding token t of sequence b (t < its length).
  int32_t page(int64_t b, int64_t t) const { return pages_[b][t / page_size_]; }
  const std::vector<int32_t>& pages(int64_t b) const { return pages_[b]; }
  // i32 [B, max_pages] with strides [num_pages, 1]: row b starts with
  // pages(b); entries past them are 0 (a page of the pool, never read).
  TensorView view(int64_t max_pages) const;
  const PageAllocator& allocator() const { return allocator_; }
  int64_t page_size() const { return page_size_; }
  int64_t batch() const { return static_cast<int64_t>(pages_.size()); }

 private:
  // Row b of table_ after pages_[b] changed from entry `from` on and had
  // `old_size` entries before: writes the new ones, zeroes those dropped.
  void SyncRow(int64_t b, size_t from, size_t old_size);

  int64_t page_size_ = 0;
  PageAllocator allocator_;
  std::vector<std::vector<int32_t>> pages_;  // [B][pages of the sequence]
  Tensor table_;                             // i32 [B, num_pages]
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_BLOCK_TABLES_H_

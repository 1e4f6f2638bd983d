// The pages of a paged KV cache's pool: which are free, and how many block
// tables hold each one. A page held by two sequences (a forked common prompt
// prefix) is shared, not copied; it returns to the free list when the last
// holder releases it.
#ifndef ATTNKIT_OPS_PAGE_ALLOCATOR_H_
#define ATTNKIT_OPS_PAGE_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnkit {

class PageAllocator {
 public:
  PageAllocator() = default;
  // A pool of `num_pages` free pages, numbered [0, num_pages).
  // InvalidArgument unless 1 <= num_pages <= INT32_MAX (block tables are i32).
  static absl::StatusOr<PageAllocator> Create(int64_t num_pages);

  // `n` free pages, each with reference count 1, lowest numbers first on a
  // fresh pool, most recently freed first after that. All or nothing:
  // ResourceExhausted naming the pages needed and free.
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  // One more holder of an allocated page (a forked sequence's block table).
  // InvalidArgument for a page outside the pool, FailedPrecondition for a
  // free one.
  absl::Status Share(int32_t page);
  // One holder fewer; the page is free again when none is left. The same
  // errors as Share.
  absl::Status Release(int32_t page);

  // Holders of `page`: 0 = free, > 1 = shared (written only after a copy).
  // 0 for a page outside the pool.
  int32_t refcount(int32_t page) const;
  bool shared(int32_t page) const { return refcount(page) > 1; }
  int64_t num_pages() const { return static_cast<int64_t>(refcounts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }

 private:
  // InvalidArgument / FailedPrecondition unless `page` is allocated.
  absl::Status CheckAllocated(int32_t page, const char* op) const;

  std::vector<int32_t> refcounts_;  // [num_pages]
  std::vector<int32_t> free_;       // a stack: back() is handed out next
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_PAGE_ALLOCATOR_H_

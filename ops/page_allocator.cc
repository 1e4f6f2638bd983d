#include "ops/page_allocator.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {

absl::StatusOr<PageAllocator> PageAllocator::Create(int64_t num_pages) {
  if (num_pages < 1 || num_pages > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache num_pages (%d) must be in [1, %d]", num_pages, INT32_MAX));
  }
  PageAllocator a;
  a.refcounts_.assign(static_cast<size_t>(num_pages), 0);
  a.free_.reserve(static_cast<size_t>(num_pages));
  // Pushed highest first, so a fresh pool hands out 0, 1, 2, ...
  for (int64_t p = num_pages - 1; p >= 0; --p) a.free_.push_back(static_cast<int32_t>(p));
  return a;
}

absl::StatusOr<std::vector<int32_t>> PageAllocator::Allocate(int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("allocation of %d pages", n));
  }
  if (n > num_free()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache out of pages: %d needed, %d free of %d", n, num_free(), num_pages()));
  }
  std::vector<int32_t> pages;
  pages.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    pages.push_back(free_.back());
    free_.pop_back();
    refcounts_[pages.back()] = 1;
  }
  return pages;
}

absl::Status PageAllocator::CheckAllocated(int32_t page, const char* op) const {
  if (page < 0 || page >= num_pages()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s of page %d: not a page of the pool, [0, num_pages (%d))", op, page, num_pages()));
  }
  if (refcounts_[page] == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s of page %d: the page is free (no block table holds it)", op, page));
  }
  return absl::OkStatus();
}

absl::Status PageAllocator::Share(int32_t page) {
  ATTNKIT_RETURN_IF_ERROR(CheckAllocated(page, "share"));
  ++refcounts_[page];
  return absl::OkStatus();
}

absl::Status PageAllocator::Release(int32_t page) {
  ATTNKIT_RETURN_IF_ERROR(CheckAllocated(page, "release"));
  if (--refcounts_[page] == 0) free_.push_back(page);
  return absl::OkStatus();
}

int32_t PageAllocator::refcount(int32_t page) const {
  return page >= 0 && page < num_pages() ? refcounts_[page] : 0;
}

}  // namespace attnkit

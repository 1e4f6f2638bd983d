#include "ops/block_tables.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<BlockTables> BlockTables::Create(int64_t batch, int64_t page_size,
                                                int64_t num_pages) {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("KV cache batch (%d) must be >= 1", batch));
  }
  BlockTables t;
  ATTNKIT_ASSIGN_OR_RETURN(t.allocator_, PageAllocator::Create(num_pages));
  ATTNKIT_ASSIGN_OR_RETURN(t.table_, Tensor::Contiguous(DType::kI32, {batch, num_pages}));
  t.page_size_ = page_size;
  t.pages_.resize(static_cast<size_t>(batch));
  return t;
}

int64_t BlockTables::PagesToGrow(int64_t b, int64_t length, int64_t tokens) const {
  if (tokens <= 0) return 0;
  const int64_t grow = CeilDiv(length + tokens, page_size_) - CeilDiv(length, page_size_);
  const bool copy = length % page_size_ != 0 && allocator_.shared(page(b, length - 1));
  return grow + (copy ? 1 : 0);
}

int64_t BlockTables::PagesToGrowAll(const std::vector<int64_t>& lengths, int64_t tokens) const {
  if (tokens <= 0) return 0;
  int64_t needed = 0;
  for (int64_t b = 0; b < batch(); ++b) {
    const int64_t length = lengths[b];
    needed += CeilDiv(length + tokens, page_size_) - CeilDiv(length, page_size_);
    if (length % page_size_ == 0) continue;
    // Grow runs in sequence order: each earlier writer of the same partial
    // last page has copied away from it, and the last holder writes in place.
    const int32_t last = page(b, length - 1);
    int64_t holders = allocator_.refcount(last);
    for (int64_t e = 0; e < b; ++e) {
      if (lengths[e] % page_size_ != 0 && page(e, lengths[e] - 1) == last) --holders;
    }
    if (holders > 1) ++needed;
  }
  return needed;
}

absl::Status BlockTables::CheckRoom(const std::vector<int64_t>& lengths, int64_t tokens) const {
  const int64_t needed = PagesToGrowAll(lengths, tokens);
  if (needed > allocator_.num_free()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache out of pages: appending %d tokens to %d sequences needs %d new pages of %d "
        "tokens, %d of %d are free; nothing was written",
        tokens, batch(), needed, page_size_, allocator_.num_free(), allocator_.num_pages()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BlockTables::PageCopy>> BlockTables::Grow(
    const std::vector<int64_t>& lengths, int64_t tokens) {
  ATTNKIT_RETURN_IF_ERROR(CheckRoom(lengths, tokens));
  std::vector<PageCopy> copies;
  for (int64_t b = 0; b < batch(); ++b) {
    const int64_t length = lengths[b];
    const int64_t n = PagesToGrow(b, length, tokens);
    if (n == 0) continue;
    // Cannot fail: the total was checked above.
    ATTNKIT_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, allocator_.Allocate(n));
    const size_t before = pages_[b].size();
    size_t next = 0;
    const int64_t fill = length % page_size_;
    if (fill != 0 && allocator_.shared(page(b, length - 1))) {
      int32_t& last = pages_[b].back();
      copies.push_back({b, last, fresh[next], fill});
      ATTNKIT_RETURN_IF_ERROR(allocator_.Release(last));  // still held by the other sequence
      last = fresh[next++];
    }
    pages_[b].insert(pages_[b].end(), fresh.begin() + next, fresh.end());
    SyncRow(b, next > 0 ? before - 1 : before, before);
  }
  return copies;
}

void BlockTables::Shrink(int64_t b, int64_t length) {
  const size_t keep = static_cast<size_t>(CeilDiv(length, page_size_)), before = pages_[b].size();
  while (pages_[b].size() > keep) {
    allocator_.Release(pages_[b].back()).IgnoreError();  // held: it is in the table
    pages_[b].pop_back();
  }
  SyncRow(b, pages_[b].size(), before);
}

void BlockTables::Fork(int64_t src, int64_t dst, int64_t tokens) {
  Shrink(dst, 0);
  const size_t n = static_cast<size_t>(CeilDiv(tokens, page_size_));
  pages_[dst].assign(pages_[src].begin(), pages_[src].begin() + n);
  for (int32_t p : pages_[dst]) allocator_.Share(p).IgnoreError();  // held by src
  SyncRow(dst, 0, 0);
}

void BlockTables::SyncRow(int64_t b, size_t from, size_t old_size) {
  int32_t* row = static_cast<int32_t*>(table_.data()) + b * allocator_.num_pages();
  const std::vector<int32_t>& pages = pages_[b];
  for (size_t j = from; j < pages.size(); ++j) row[j] = pages[j];
  for (size_t j = pages.size(); j < old_size; ++j) row[j] = 0;
}

TensorView BlockTables::view(int64_t max_pages) const {
  TensorView v = table_.view();
  v.shape[1] = max_pages;
  return v;
}

}  // namespace attnkit

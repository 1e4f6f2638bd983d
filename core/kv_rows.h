// Where key/value rows live: a dense [B, G, Tk, d] tensor or a paged pool
// [num_pages, page_size, G, d] read through a block table (core/backend.h
// gives the shapes). Every kernel that reads K or V row by row asks this
// instead of indexing the view itself, so dense and paged problems share one
// code path and give the same bits.
#ifndef ATTNKIT_CORE_KV_ROWS_H_
#define ATTNKIT_CORE_KV_ROWS_H_

#include <cstdint>
#include <limits>

#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

class KvRows {
 public:
  KvRows() = default;
  // `p` and `a` must have passed ValidateArgs.
  KvRows(const AttentionProblem& p, const AttentionArgs& a) {
    if (!p.is_paged()) return;
    table_ = static_cast<const int32_t*>(a.block_table.data);
    table_b_ = a.block_table.strides[0];
    table_j_ = a.block_table.strides[1];
    page_size_ = p.page_size;
    while ((int64_t{1} << page_shift_) < page_size_) ++page_shift_;  // a power of two
  }

  bool paged() const { return table_ != nullptr; }
  int64_t page_size() const { return page_size_; }

  // Element offset in k or v (same shape) of row t of KV head g, sequence b.
  int64_t Offset(const TensorView& kv, int64_t b, int64_t g, int64_t t) const {
    if (table_ == nullptr) return kv.Offset(b, g, t, 0);
    return kv.Offset(Page(b, t), t & (page_size_ - 1), g, 0);
  }
  // Element offset of the same row's scale in k_scale or v_scale (int8).
  int64_t ScaleOffset(const TensorView& scale, int64_t b, int64_t g, int64_t t) const {
    if (table_ == nullptr) return scale.Offset(b, g, t);
    return scale.Offset(Page(b, t), t & (page_size_ - 1), g);
  }
  // Rows [t, t + RunLength(t)) are evenly spaced in memory (one page, or all
  // of a dense tensor): Offset(t + j) = Offset(t) + j * the row stride.
  int64_t RunLength(int64_t t) const {
    return table_ == nullptr ? std::numeric_limits<int64_t>::max()
                             : page_size_ - (t & (page_size_ - 1));
  }
  // Elements between consecutive rows of one run.
  static int64_t RowStride(const TensorView& kv, bool paged) {
    return paged ? kv.strides[1] : kv.strides[2];
  }

 private:
  int64_t Page(int64_t b, int64_t t) const {
    return table_[b * table_b_ + (t >> page_shift_) * table_j_];  // no division
  }

  const int32_t* table_ = nullptr;
  int64_t table_b_ = 0, table_j_ = 0;
  int64_t page_size_ = 0;
  int page_shift_ = 0;  // log2(page_size_): ValidateProblem holds it to a power of two
};

}  // namespace attnkit

#endif  // ATTNKIT_CORE_KV_ROWS_H_

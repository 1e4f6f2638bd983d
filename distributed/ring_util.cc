// Row staging, views and the log-sum-exp merge of distributed/ring_internal.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "core/dtype.h"
#include "core/status_macros.h"
#include "distributed/ring_internal.h"

namespace attnkit {
namespace dist {

absl::StatusOr<void*> Workspace::Bytes(int slot, int64_t bytes) {
  if (slots_.size() <= static_cast<size_t>(slot)) slots_.resize(static_cast<size_t>(slot) + 1);
  AlignedBuffer& b = slots_[static_cast<size_t>(slot)];
  if (b.size() < static_cast<size_t>(bytes) || b.data() == nullptr) {
    b = AlignedBuffer();  // free the old one first
    absl::StatusOr<AlignedBuffer> fresh = AlignedBuffer::Allocate(static_cast<size_t>(bytes));
    if (!fresh.ok()) return fresh.status();
    b = std::move(*fresh);
  }
  return b.data();
}

absl::StatusOr<float*> Workspace::Floats(int slot, int64_t elements, bool zero) {
  absl::StatusOr<void*> p = Bytes(slot, elements * static_cast<int64_t>(sizeof(float)));
  if (!p.ok()) return p.status();
  if (zero) std::memset(*p, 0, static_cast<size_t>(elements) * sizeof(float));
  return static_cast<float*>(*p);
}

void RowsToF32(const TensorView& src, int64_t row0, int64_t rows, float* dst) {
  const int64_t width = src.rank == 4 ? src.dim(3) : 1;
  const int64_t cstride = src.rank == 4 ? src.strides[3] : 1;
  for (int64_t b = 0; b < src.dim(0); ++b) {
    for (int64_t h = 0; h < src.dim(1); ++h) {
      for (int64_t t = 0; t < rows; ++t) {
        const int64_t at = src.Offset(b, h, row0 + t);
        float* out = dst + ((b * src.dim(1) + h) * rows + t) * width;
        if (src.dtype == DType::kF32 && cstride == 1) {
          std::memcpy(out, static_cast<const float*>(src.data) + at, width * sizeof(float));
          continue;
        }
        for (int64_t c = 0; c < width; ++c) out[c] = src.LoadF32(at + c * cstride);
      }
    }
  }
}

void RowsFromF32(const float* src, int64_t row0, int64_t rows, const TensorView& dst) {
  const int64_t width = dst.rank == 4 ? dst.dim(3) : 1;
  const int64_t cstride = dst.rank == 4 ? dst.strides[3] : 1;
  for (int64_t b = 0; b < dst.dim(0); ++b) {
    for (int64_t h = 0; h < dst.dim(1); ++h) {
      for (int64_t t = 0; t < rows; ++t) {
        const int64_t at = dst.Offset(b, h, row0 + t);
        const float* in = src + ((b * dst.dim(1) + h) * rows + t) * width;
        for (int64_t c = 0; c < width; ++c)
          StoreFromF32(dst.data, dst.dtype, at + c * cstride, in[c]);
      }
    }
  }
}

TensorView RowView(void* data, DType t, int64_t b, int64_t x, int64_t total_rows, int64_t row0,
                   int64_t rows, int64_t d) {
  TensorView v;
  v.data = static_cast<char*>(data) + static_cast<size_t>(row0 * d) * DTypeSize(t);
  v.dtype = t;
  v.rank = 4;
  v.shape = {b, x, rows, d};
  v.strides = {x * total_rows * d, total_rows * d, d, 1};
  return v;
}

void SetBlockMask(const AttentionProblem& sp, const BlockPlan& plan, int32_t* lens,
                  AttentionArgs* args) {
  const int64_t B = sp.batch, cq = sp.q_len, ck = sp.kv_len;
  if (sp.has_kv_lengths()) {
    for (int64_t b = 0; b < B; ++b) lens[b] = static_cast<int32_t>(plan.kv_lengths[b]);
    args->kv_lengths = ContiguousView(lens, DType::kI32, {B});
  }
  if (sp.blocked_mask) {
    TensorView m;
    m.data = const_cast<uint8_t*>(plan.dense.data());
    m.dtype = DType::kU8;
    m.rank = 4;
    m.shape = {B, sp.num_heads, cq, ck};
    m.strides = {cq * ck, 0, ck, 1};
    args->blocked_mask = m;
  }
}

absl::Status PassKvBlock(Communicator& comm, const void* cur_k, const void* cur_v, char* next_kv,
                         int64_t kv_bytes, int next, int prev,
                         std::vector<Communicator::Request>* requests) {
  ATTNKIT_RETURN_IF_ERROR(Post(comm.Irecv(next_kv, kv_bytes, prev, kTagK), requests));
  ATTNKIT_RETURN_IF_ERROR(Post(comm.Irecv(next_kv + kv_bytes, kv_bytes, prev, kTagV), requests));
  ATTNKIT_RETURN_IF_ERROR(Post(comm.Isend(cur_k, kv_bytes, next, kTagK), requests));
  return Post(comm.Isend(cur_v, kv_bytes, next, kTagV), requests);
}

void MergePartial(float* acc_o, float* acc_lse, const float* part_o, const float* part_lse,
                  int64_t rows, int64_t d) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float pl = part_lse[r];
    if (!(pl > kNegInf)) continue;  // the block hid every key of this row
    float* o = acc_o + r * d;
    const float* po = part_o + r * d;
    const float al = acc_lse[r];
    if (!(al > kNegInf)) {
      std::memcpy(o, po, static_cast<size_t>(d) * sizeof(float));
      acc_lse[r] = pl;
      continue;
    }
    const float m = al > pl ? al : pl;
    const float wa = std::exp(al - m), wp = std::exp(pl - m);
    const float sum = wa + wp, inv = 1.0f / sum;
    for (int64_t c = 0; c < d; ++c) o[c] = (wa * o[c] + wp * po[c]) * inv;
    acc_lse[r] = m + std::log(sum);
  }
}

absl::Status Post(absl::StatusOr<Communicator::Request> request,
                  std::vector<Communicator::Request>* requests) {
  if (!request.ok()) return request.status();
  requests->push_back(std::move(*request));
  return absl::OkStatus();
}

absl::Status ComputeWhileTransferring(Communicator& comm,
                                      std::vector<Communicator::Request>& transfers, double posted,
                                      absl::string_view what,
                                      const std::function<absl::Status()>& compute,
                                      DistStats* stats) {
  const double start = NowSeconds();
  if (transfers.empty()) {
    const absl::Status st = compute();
    stats->compute_s += NowSeconds() - start;
    return st;
  }
  absl::Status compute_status;
  double compute_end = start;
  std::thread worker([&] {
    compute_status = compute();
    compute_end = NowSeconds();
  });
  const absl::Status wait_status = comm.WaitAll(transfers, what);
  const double done = NowSeconds();
  worker.join();
  stats->compute_s += compute_end - start;
  stats->transfer_s += done - posted;
  stats->wait_s += std::max(0.0, done - compute_end);
  return compute_status.ok() ? wait_status : compute_status;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dist
}  // namespace attnkit

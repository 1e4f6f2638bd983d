#include "harness/paired_read.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "harness/machine_kernels.h"

namespace attnkit {

ReadBuffer::ReadBuffer(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  madvise(p, bytes, MADV_HUGEPAGE);
  data_ = static_cast<float*>(p);
  bytes_ = bytes;
}

ReadBuffer::~ReadBuffer() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

PairedReadLoop::PairedReadLoop(int threads) : pool_(threads) {}

bool PairedReadLoop::Resize(int64_t bytes) {
  // kChunksPerThread chunks per thread, each whole steps of four streams of
  // two 512-bit vectors (512 bytes), rounded up.
  const int64_t chunks = kChunksPerThread * pool_.num_threads();
  const int64_t chunk_bytes =
      (std::max<int64_t>(bytes, 65536) + chunks * 512 - 1) / (chunks * 512) * 512;
  const size_t want = static_cast<size_t>(chunk_bytes * chunks);
  if (buffer_ == nullptr || buffer_->bytes() < want) {
    buffer_.reset();  // the old one first: both at once may not fit
    auto fresh = std::make_unique<ReadBuffer>(want);
    if (fresh->data() == nullptr) {
      bytes_ = 0;
      return false;
    }
    std::fill(fresh->data(), fresh->data() + want / sizeof(float), 1.0f);  // first touch
    buffer_ = std::move(fresh);
  }
  bytes_ = static_cast<int64_t>(want);
  return true;
}

double PairedReadLoop::TimeOnePass() {
  const int64_t chunks = kChunksPerThread * pool_.num_threads();
  const size_t chunk = static_cast<size_t>(bytes_ / chunks) / sizeof(float);
  std::vector<float> sums(static_cast<size_t>(chunks), 0.0f);
  const float* data = buffer_->data();
  const auto start = std::chrono::steady_clock::now();
  pool_.Run(chunks, [&](int64_t c, int) {
    sums[static_cast<size_t>(c)] = StreamingSumFourStreams(data + c * chunk, chunk);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (float s : sums) sink_ += s;
  return seconds;
}

}  // namespace attnkit

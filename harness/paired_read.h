// A read loop to pair with a memory-bound kernel: the same bytes read by the
// same number of threads, timed in alternation with the kernel's calls, so
// the kernel's GB/s is judged against what the memory system gave in the
// same seconds rather than against a figure taken a minute earlier (on a
// shared host the read bandwidth swings 30 % or more between minutes).
#ifndef ATTNKIT_HARNESS_PAIRED_READ_H_
#define ATTNKIT_HARNESS_PAIRED_READ_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "platform/thread_pool.h"

namespace attnkit {

// Anonymous memory for read loops: transparent huge pages where the kernel
// allows them, so first-touching a gigabyte costs a few hundred 2 MiB faults
// instead of a quarter million 4 KiB ones. data is null when mmap fails.
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t bytes);
  ~ReadBuffer();
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  float* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

class PairedReadLoop {
 public:
  // `threads` readers (the kernel's thread count) on a pool of their own,
  // summing chunks of the buffer (kChunksPerThread per thread, handed out as
  // the kernels' work items are, so a late-waking worker costs little) as
  // four interleaved streams each (StreamingSumFourStreams, the loop of
  // `attnkit peak`'s read limit).
  explicit PairedReadLoop(int threads);

  // Makes the next passes read `bytes` (at least 64 KiB, rounded up to whole
  // chunks: at most 4 KiB per thread more): the buffer grows
  // (and is first-touched, outside any timing) when it is smaller, and is
  // kept for later problems. False when the memory cannot be had.
  bool Resize(int64_t bytes);
  int64_t bytes() const { return bytes_; }
  // The first bytes() of the buffer the passes read (null before Resize), so
  // a test can read the very same memory another way.
  const float* data() const { return buffer_ == nullptr ? nullptr : buffer_->data(); }

  // One timed pass over bytes() on every thread; its seconds. Resize first.
  double TimeOnePass();

 private:
  static constexpr int64_t kChunksPerThread = 8;
  ThreadPool pool_;
  std::unique_ptr<ReadBuffer> buffer_;
  int64_t bytes_ = 0;
  float sink_ = 0;  // the sums, so the reads cannot be dropped
};

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_PAIRED_READ_H_

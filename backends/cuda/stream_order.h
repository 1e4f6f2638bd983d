// Ordering a backend's scratch memory across streams. A CUDA backend keeps
// one grow-only workspace (split-K partials, cuBLAS's score blocks, the
// backward's dQ partials) and returns from Forward without waiting, while
// SetStream may move the next call to another stream: without an order, that
// call's kernels could overwrite scratch the previous call's kernels still
// read. The rule: when the stream changes away from the stream that last used
// the scratch, an event is recorded on it, and the first call that uses the
// scratch on another stream waits for that event (cudaStreamWaitEvent: the
// device waits, the host never blocks). Plain C++ over opaque stream
// handles, so the decisions are tested without a GPU (stream_order_test).
#ifndef ATTNKIT_BACKENDS_CUDA_STREAM_ORDER_H_
#define ATTNKIT_BACKENDS_CUDA_STREAM_ORDER_H_

namespace attnkit {
namespace cuda {

// A cudaStream_t as an opaque value (nullptr is the legacy default stream).
using StreamHandle = const void*;

class ScratchOrder {
 public:
  // The backend's stream is about to change from `from` to `to` (SetStream,
  // while `from` is still alive): true when the event must be recorded on
  // `from` first, because `from` used the scratch after the event's last
  // record. Call Recorded() once the record succeeded.
  bool RecordOnSwitch(StreamHandle from, StreamHandle to) const;
  void Recorded() { recorded_ = true; }

  // A call is about to use the scratch on `stream`: true when it must first
  // make `stream` wait for the event (the scratch was last used on another
  // stream, whose work up to the switch the event holds).
  bool WaitBeforeUse(StreamHandle stream);

  // Uses so far; Synchronize reads it before it waits.
  long long uses() const { return uses_; }

  // Every call queued on `stream` up to `uses` uses has finished
  // (Synchronize, or the backend's own stream synchronized before it is
  // destroyed): when `stream` was the scratch's last user and no call used
  // the scratch since (another thread may have queued one meanwhile),
  // nothing is left to wait for.
  void Finished(StreamHandle stream, long long uses);

 private:
  long long uses_ = 0;
  bool used_ = false;  // some call used the scratch since the last Finished
  StreamHandle last_user_ = nullptr;
  bool recorded_ = false;  // the event holds last_user_'s work up to its last use
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_STREAM_ORDER_H_

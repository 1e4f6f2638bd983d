#include "backends/cuda/stream_order.h"

namespace attnkit {
namespace cuda {

bool ScratchOrder::RecordOnSwitch(StreamHandle from, StreamHandle to) const {
  return from != to && used_ && last_user_ == from && !recorded_;
}

bool ScratchOrder::WaitBeforeUse(StreamHandle stream) {
  // The stream changes only through SetStream, and a switch away from the
  // last user records the event (RecordOnSwitch), so a use on another stream
  // finds the event holding the last user's work.
  const bool wait = used_ && last_user_ != stream;
  ++uses_;
  used_ = true;
  last_user_ = stream;
  recorded_ = false;  // this use comes after any earlier record
  return wait;
}

void ScratchOrder::Finished(StreamHandle stream, long long uses) {
  if (used_ && last_user_ == stream && uses_ == uses) {
    used_ = false;
    recorded_ = false;
  }
}

}  // namespace cuda
}  // namespace attnkit

// Test hook for the Communicator's message splitting (distributed/comm.h): messages
// and collective blocks longer than MaxMessageBytes() travel as several MPI
// operations. The default is 1 GiB; tests lower it so that the split paths run
// on small buffers. Every rank of a job must use the same value, and it may
// change only while no transfer is pending (Wait checks pieces by it).
#ifndef ATTNKIT_DISTRIBUTED_COMM_TESTING_H_
#define ATTNKIT_DISTRIBUTED_COMM_TESTING_H_

#include <cstdint>

namespace attnkit {
namespace dist {
namespace testing {

inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{1} << 30;

int64_t MaxMessageBytes();
// Sets the split size (>= 1; values outside [1, 1 GiB] are clamped).
void SetMaxMessageBytes(int64_t bytes);

}  // namespace testing
}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_COMM_TESTING_H_

// Error kinds inside qccl and the deadline every wait carries.
//
// Internal code throws qk exceptions; the C API (api.cc) turns them into a
// qcclResult_t and keeps the message for qcclGetLastError:
//   ValueError/TypeError/IndexError -> qcclInvalidArgument
//   UsageError                      -> qcclInvalidUsage
//   RemoteError                     -> qcclRemoteError (a peer died, closed or sent garbage)
//   TimeoutError                    -> qcclTimeout
//   IoError                         -> qcclSystemError
#pragma once

#include <chrono>
#include <string>

#include "qccl.h"
#include "qk/base/error.h"

namespace qccl {

// A peer failed, closed its end, or sent bytes that are not a valid qccl message.
class RemoteError : public qk::IoError { using qk::IoError::IoError; };
// A call made in a state that does not allow it (aborted communicator, bad group use).
class UsageError : public qk::Error { using qk::Error::Error; };

qcclResult_t result_of(const std::exception& e);

// A point in time after which a wait gives up.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(double seconds)
      : total_s_(seconds),
        at_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds))) {}
  bool expired() const { return Clock::now() >= at_; }
  double total_seconds() const { return total_s_; }
  double remaining_seconds() const {
    return std::chrono::duration<double>(at_ - Clock::now()).count();
  }
  // Milliseconds to pass to poll(): at most cap, at least 0.
  int poll_ms(int cap) const {
    double ms = remaining_seconds() * 1e3;
    if (ms <= 0) return 0;
    return ms < cap ? static_cast<int>(ms) + 1 : cap;
  }

 private:
  double total_s_;
  Clock::time_point at_;
};

}  // namespace qccl

#define QCCL_REMOTE_ERROR(...) QK_THROW(::qccl::RemoteError, __VA_ARGS__)

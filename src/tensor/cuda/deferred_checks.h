// Input checks whose answer the host reads when it next waits for the
// device, not at once: a kernel that finds a bad index or target writes the
// first bad position + 1 into an error flag (atomicMin; all ones for none),
// and the op leaves the flag here instead of waiting for it, as PyTorch's
// device-side asserts report at the next synchronization. A training step's
// embedding and loss checks then cost no host wait; an out-of-range input
// still raises the CPU's IndexError, from the next read-back (a loss's
// item(), the step's metrics) or synchronize(), saying so.
//
//   Tensor bad = new_error_flag(like, stream);
//   launch_embedding(..., error_flag_ptr(bad), stream);
//   defer_check(bad, stream, [=](int64_t pos) { return str_cat("embedding: index ... at position ", pos); });
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::cuda {

// An i64 flag on like's device, set to "none" on `stream`.
Tensor new_error_flag(const Tensor& like, cudaStream_t stream);
inline unsigned long long* error_flag_ptr(const Tensor& flag) {
  return static_cast<unsigned long long*>(flag.raw_data());
}

// `describe(pos)` makes the IndexError's message for the first bad position
// (it may read the offending value from the device). Past 1024 pending
// checks on a device they are read at once.
void defer_check(const Tensor& flag, cudaStream_t stream, std::function<std::string(int64_t pos)> describe);

// A check recorded in a graph (graph.cc): while a capture is open on this
// thread, defer_check hands its checks to the capture's sink, and each
// replay defers them again on the stream it runs on (the recorded memset
// resets the flag; the recorded kernel sets it).
struct RecordedCheck {
  Tensor flag;
  std::function<std::string(int64_t pos)> describe;
};
// nullptr: no capture open.
void set_check_sink(std::vector<RecordedCheck>* sink);
void defer_recorded_checks(const std::vector<RecordedCheck>& checks, cudaStream_t stream);

// The checks pending on a device, their flags copied out on `stream`
// (before the caller's wait for it; flags left on other streams are waited
// for here; device -1: none). raise() after that wait throws IndexError for
// the first bad one.
class PendingChecks {
 public:
  PendingChecks(int device, cudaStream_t stream);
  void raise();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace qk::cuda

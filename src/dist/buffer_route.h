// How one call's tensors reach qccl. Host tensors go as they are. A device
// tensor whose memory qccl carries itself (CUDA memory under its NCCL
// backend: qcclCommDeviceBackend) goes as it is too, but qccl's progress
// thread first waits for a fence recorded on the caller's current stream, so
// NCCL reads what the kernels queued before the call wrote, while the caller
// goes on queueing work. A tensor of any other device (no device-aware
// backend linked, or a backend qccl does not know) travels through a host
// copy: read from the device when the call is made, written back by
// Work::wait() on the caller's thread and stream.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qk/dist/process_group.h"

namespace qk::dist {

class BufferRoute {
 public:
  explicit BufferRoute(qcclComm_t comm) : comm_(comm) {}

  // The pointer qccl gets for `t` (contiguous, checked by the caller).
  // `read`: qccl reads it, so a host copy must hold the device's contents;
  // `written`: qccl writes it, so a host copy goes back at wait().
  void* reach(const Tensor& t, bool read, bool written);

  // Submits `call` on `comm` (behind the fence when a tensor went direct to
  // a device backend) and returns the Work that keeps this call's tensors.
  WorkPtr submit(qk::qccl::Communicator& comm, std::function<qcclResult_t(qcclComm_t)> call);

 private:
  qcclComm_t comm_;
  Device direct_device_ = kCPU;  // of the tensors that go straight to a device backend
  std::vector<Tensor> keep_;
  std::vector<Work::CopyBack> back_;
  std::function<void()> fence_;
};

}  // namespace qk::dist

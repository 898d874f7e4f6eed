#include "buffer_route.h"

#include "qk/base/error.h"
#include "qk/tensor/backend.h"

namespace qk::dist {

void* BufferRoute::reach(const Tensor& t, bool read, bool written) {
  keep_.push_back(t);
  if (t.device().is_cpu()) return t.raw_data();
  const char* device_backend = nullptr;
  QK_CHECK_AS(IoError, qcclCommDeviceBackend(comm_, t.raw_data(), &device_backend) == qcclSuccess,
              "qk::dist: ", qcclGetLastError(comm_));
  if (device_backend != nullptr) {
    // One fence covers every tensor of the call: all are on the caller's stream.
    if (!fence_) {
      fence_ = record_fence(t.device());
      direct_device_ = t.device();
    }
    return t.raw_data();
  }
  Tensor host = empty(t.shape(), TensorOptions(t.dtype()));
  if (read && t.nbytes() > 0)
    backend(t.device().type).copy(host.raw_data(), kCPU, t.raw_data(), t.device(), t.nbytes());
  keep_.push_back(host);
  if (written) back_.push_back({t, host});
  return host.raw_data();
}

WorkPtr BufferRoute::submit(qk::qccl::Communicator& comm, std::function<qcclResult_t(qcclComm_t)> call) {
  std::shared_ptr<std::string> fence_error;
  if (fence_) {
    fence_error = std::make_shared<std::string>();
    // On qccl's thread: the tensors' device made current first (NCCL binds a
    // communicator to the device current when it is made: the rank's GPU,
    // not device 0), then the wait for the kernels that wrote them.
    call = [fence = std::move(fence_), device = direct_device_, fence_error, call = std::move(call)](qcclComm_t c) {
      try {
        backend(device.type).set_current_device(device.index);
        fence();
      } catch (const std::exception& e) {
        // Work::wait() raises this; the call never ran, on no rank's data.
        *fence_error = std::string("waiting for the device to finish the tensors of a collective: ") + e.what();
        return qcclUnhandledCudaError;
      }
      return call(c);
    };
  }
  auto w = comm.submit(std::move(call));
  return std::make_shared<Work>(std::move(w), std::move(keep_), std::move(back_), std::move(fence_error));
}

}  // namespace qk::dist

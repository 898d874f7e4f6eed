// The cudaStream_t behind a qk::cuda::Stream, and the current one of a
// device: where every kernel, copy and allocation of the backend goes.
#pragma once

#include <cuda_runtime_api.h>

#include "qk/tensor/cuda/stream.h"

namespace qk::cuda {

cudaStream_t stream_handle(const Stream& s);
cudaStream_t current_stream_handle(int device);
// The current stream's id for the caching allocator (0: the default stream;
// ids are never reused, unlike handles).
uint64_t current_stream_id(int device);
// Called by a stream's destructor once its work is done (cuda_backend.cc).
void stream_retired(uint64_t id);

// Makes `device` the current CUDA device for the scope (kernels launch and
// streams live on the current device); throws DeviceError when it cannot.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0, now_ = 0;
};

// For one kernel-table entry: the device current for the scope, and its
// current stream.
class DeviceStream {
 public:
  explicit DeviceStream(int device) : guard_(device), stream_(current_stream_handle(device)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace qk::cuda

#include "cudnn_handle.h"

#include <string>
#include <vector>

#include "qk/base/error.h"

namespace qk::cuda {

cudnnHandle_t cudnn_handle(int device) {
  thread_local std::vector<cudnnHandle_t> handles;
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(device + 1, nullptr);
  if (!handles[device]) QK_CUDNN_CHECK(cudnnCreate(&handles[device]));
  return handles[device];
}

void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  throw DeviceError(std::string("cuDNN call ") + call + " failed: " + cudnnGetErrorString(st), file, line);
}

}  // namespace qk::cuda

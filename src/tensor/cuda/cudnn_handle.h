// The cuDNN handle of the calling thread for a device, and the status check
// every cuDNN call goes through (convolutions, fused attention).
#pragma once

#include <cudnn.h>

namespace qk::cuda {

// One handle per thread and device: a call sets the handle's stream, so
// threads on different streams must not share one. Made on first use, kept
// for the thread's life (destroying them at thread exit could race the
// driver's teardown).
cudnnHandle_t cudnn_handle(int device);

[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line);

}  // namespace qk::cuda

#define QK_CUDNN_CHECK(call)                                                                              \
  do {                                                                                                    \
    cudnnStatus_t qk_dnn_st_ = (call);                                                                    \
    if (qk_dnn_st_ != CUDNN_STATUS_SUCCESS) ::qk::cuda::throw_cudnn_error(qk_dnn_st_, #call, __FILE__, __LINE__); \
  } while (0)

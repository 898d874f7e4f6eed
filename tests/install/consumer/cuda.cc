// Links the installed CUDA backend: it registers itself, and says why no
// device is usable where there is none.
#include <cstdio>

#include "qk/tensor/backend.h"
#include "qk/tensor/cuda.h"

int main() {
  if (!qk::has_backend(qk::DeviceType::cuda)) {
    std::printf("linking qianka::tensor_cuda did not register the CUDA backend\n");
    return 1;
  }
  std::printf("CUDA backend linked: %d device(s)%s%s\n", qk::cuda::device_count(),
              qk::cuda::is_available() ? "" : "; ", qk::cuda::unavailable_reason().c_str());
  return 0;
}

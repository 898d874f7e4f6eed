// qk/tensor/cuda.h through the backend table: the same code whether the CUDA
// backend is linked in or not.
#include "qk/tensor/cuda.h"

#include <atomic>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/tensor/backend.h"

namespace qk::cuda {

namespace {

Backend& cuda_backend(int device) {
  check_device_usable(Device(DeviceType::cuda, device));
  return backend(DeviceType::cuda);
}

}  // namespace

bool is_available() { return device_count() > 0; }

int device_count() { return has_backend(DeviceType::cuda) ? backend(DeviceType::cuda).device_count() : 0; }

std::string unavailable_reason() {
  if (!has_backend(DeviceType::cuda))
    return "this program has no CUDA backend (qianka built without the CUDA toolkit, or the program does not "
           "link qianka::tensor_cuda)";
  return backend(DeviceType::cuda).unavailable_reason();
}

void synchronize(int device) { cuda_backend(device).synchronize(device); }
uint64_t memory_allocated(int device) { return cuda_backend(device).memory_stats(device).allocated; }
uint64_t max_memory_allocated(int device) { return cuda_backend(device).memory_stats(device).peak_allocated; }
uint64_t memory_reserved(int device) { return cuda_backend(device).memory_stats(device).reserved; }
void reset_peak_memory_stats(int device) { cuda_backend(device).reset_peak_memory(device); }
void empty_cache(int device) { cuda_backend(device).empty_cache(device); }

namespace {
std::atomic<bool> allow_tf32{false};
}  // namespace
void set_matmul_allow_tf32(bool allow) { allow_tf32.store(allow); }
bool matmul_allow_tf32() { return allow_tf32.load(); }

QK_ENV_BOOL(env_cudnn_benchmark, "QK_CUDNN_BENCHMARK", false,
            "Choose cuDNN convolution algorithms by timing them once per shape (torch.backends.cudnn.benchmark)");
namespace {
std::atomic<int> benchmark_override{-1};  // -1: the environment's
}  // namespace
void set_cudnn_benchmark(bool on) { benchmark_override.store(on ? 1 : 0); }
bool cudnn_benchmark() {
  const int o = benchmark_override.load();
  return o >= 0 ? o == 1 : env_cudnn_benchmark.get();
}

}  // namespace qk::cuda

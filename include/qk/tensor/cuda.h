// torch.cuda's everyday calls, in every build: in one without the CUDA
// backend (or on a machine without a GPU) is_available() is false and
// unavailable_reason() says why; the others then raise DeviceError.
//
//   if (qk::cuda::is_available()) model.to(qk::Device("cuda:0"));
//   ...
//   fmt::print("peak {}\n", qk::cuda::max_memory_allocated());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qk::cuda {

// Whether this program has the CUDA backend (it links qianka::tensor_cuda;
// `qk` does when built with the toolkit) and it sees at least one device.
bool is_available();
int device_count();
// Why no CUDA device can be used ("" when one can): the build has no CUDA
// backend, or the runtime's answer (no driver, no device, ...).
std::string unavailable_reason();

// Waits for all work queued on the device.
void synchronize(int device = 0);
// Memory of tensors on the device (the caching allocator's figures):
// allocated now, the peak since the last reset, held from the device
// (allocated plus cached blocks).
uint64_t memory_allocated(int device = 0);
uint64_t max_memory_allocated(int device = 0);
uint64_t memory_reserved(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Gives the cached blocks back to the device (other processes can use them).
void empty_cache(int device = 0);

// The backend's plan caches (cuBLASLt's GEMM descriptors and algorithm per
// shape, cuDNN's convolution algorithm per shape): how often a call found
// its plan and how often one was built. After the first step of a shape a
// training step builds none. Empty in a program without the CUDA backend.
struct PlanCacheStats {
  std::string name;  // "cublaslt_matmul", "cudnn_conv2d_forward", ...
  int64_t hits = 0, builds = 0, size = 0;
};
std::vector<PlanCacheStats> plan_cache_stats();

// Whether f32 matrix products may use TF32 tensor cores (10-bit mantissa
// inputs, f32 accumulation): off by default, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32. Works in every build.
void set_matmul_allow_tf32(bool allow);
bool matmul_allow_tf32();

// Whether a convolution shape's cuDNN algorithms are chosen by timing them
// (cudnnFind*, once per shape and direction: the first call of a shape
// runs each candidate) rather than by cuDNN's heuristics: PyTorch's
// torch.backends.cudnn.benchmark. Off by default; QK_CUDNN_BENCHMARK=1 turns
// it on. A shape is planned again under the other mode. Works in every build.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

}  // namespace qk::cuda

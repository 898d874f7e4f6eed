// The optimizers' kernel-table entries for CUDA tensors (qk/tensor/ops/optimizer.h):
// the per-step constants in double, as the CPU kernels compute them, then one
// fused launch per parameter on its device's current stream.
#include <cuda_runtime_api.h>

#include <cmath>

#include "qk/base/error.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/cuda/stream.h"
#include "optimizer_steps.h"

namespace qk::cuda {

namespace {

void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  QK_CHECK_DEVICE(e == cudaSuccess, what, " on CUDA: the launch failed: ", cudaGetErrorName(e), " (",
                  cudaGetErrorString(e), ")");
}

// Makes the parameter's device current for the launch.
class OnDevice {
 public:
  explicit OnDevice(int device) : now_(device) {
    cudaGetDevice(&prev_);
    if (prev_ != now_) cudaSetDevice(now_);
  }
  ~OnDevice() {
    if (prev_ != now_) cudaSetDevice(prev_);
  }
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(current_stream(now_).handle()); }

 private:
  int prev_ = 0, now_ = 0;
};

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const ops::SgdStepArgs& a) {
  OnDevice on(p.device().index);
  const bool momentum = a.momentum != 0;
  SgdConsts c{a.lr, a.weight_decay, a.momentum, 1.0 - a.dampening, momentum, a.nesterov, a.first_step};
  launch_sgd_step(p.dtype() == DType::f64, p.raw_data(), g.raw_data(), momentum ? buf.raw_data() : nullptr, p.numel(),
                  c, on.stream());
  check_launch("sgd step");
}

void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const ops::AdamStepArgs& a) {
  OnDevice on(p.device().index);
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  AdamConsts c{a.lr / bc1,          1.0 / std::sqrt(bc2), a.beta1,  a.beta2,    1.0 - a.beta1,
               1.0 - a.beta2,       a.eps,                a.weight_decay, 1.0 - a.lr * a.weight_decay,
               a.decoupled,         a.amsgrad};
  launch_adam_step(p.dtype() == DType::f64, p.raw_data(), g.raw_data(), m.raw_data(), v.raw_data(),
                   a.amsgrad ? vmax.raw_data() : nullptr, p.numel(), c, on.stream());
  check_launch("adam step");
}

[[maybe_unused]] const bool registered = [] {
  ops::sgd_step_kernel.set(DeviceType::cuda, &sgd_step);
  ops::adam_step_kernel.set(DeviceType::cuda, &adam_step);
  return true;
}();

}  // namespace

}  // namespace qk::cuda

// The optimizers' kernel-table entries for CUDA tensors (qk/tensor/ops/optimizer.h):
// the per-step constants in double, as the CPU kernels compute them, then one
// fused launch per parameter on its device's current stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/base/error.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/tensor/cuda/stream.h"
#include "multi_tensor.h"
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

// Launches over the tensors of one dtype at a time, kMultiTensorMax a launch.
template <typename Launch>
void for_each_group(const std::vector<Tensor>& tensors, Launch launch) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<void*> data;
    std::vector<int64_t> n;
    for (const Tensor& t : tensors)
      if (t.dtype() == dt && t.numel() > 0) data.push_back(t.raw_data()), n.push_back(t.numel());
    for (size_t i = 0; i < data.size(); i += kMultiTensorMax) {
      const int count = static_cast<int>(std::min<size_t>(kMultiTensorMax, data.size() - i));
      launch(static_cast<int>(dt), data.data() + i, n.data() + i, count);
    }
  }
}

void multi_tensor_unscale_norm(const std::vector<Tensor>& tensors, double scale, const Tensor& out) {
  OnDevice on(out.device().index);
  double* sums = static_cast<double*>(out.raw_data());
  for_each_group(tensors, [&](int dt, void* const* data, const int64_t* n, int count) {
    launch_multi_tensor_unscale_norm(dt, data, n, count, scale, sums, on.stream());
  });
  check_launch("multi_tensor_unscale_norm_");
}

void multi_tensor_scale(const std::vector<Tensor>& tensors, double scale) {
  OnDevice on(tensors[0].device().index);
  for_each_group(tensors, [&](int dt, void* const* data, const int64_t* n, int count) {
    launch_multi_tensor_scale(dt, data, n, count, scale, on.stream());
  });
  check_launch("multi_tensor_scale_");
}

[[maybe_unused]] const bool registered = [] {
  ops::sgd_step_kernel.set(DeviceType::cuda, &sgd_step);
  ops::adam_step_kernel.set(DeviceType::cuda, &adam_step);
  ops::multi_tensor_unscale_norm_kernel.set(DeviceType::cuda, &multi_tensor_unscale_norm);
  ops::multi_tensor_scale_kernel.set(DeviceType::cuda, &multi_tensor_scale);
  return true;
}();

}  // namespace

}  // namespace qk::cuda

// The optimizers' kernel-table entries for CUDA tensors (qk/tensor/ops/optimizer.h):
// the per-step constants in double, as the CPU kernels compute them, then one
// fused launch per parameter (or per group of parameters, the list kernels)
// on its device's current stream.
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

SgdConsts sgd_consts(const ops::SgdStepArgs& a) {
  return {a.lr, a.weight_decay, a.momentum, 1.0 - a.dampening, a.momentum != 0, a.nesterov, a.first_step};
}

AdamConsts adam_consts(const ops::AdamStepArgs& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  return {a.lr / bc1,    1.0 / std::sqrt(bc2), a.beta1,        a.beta2,
          1.0 - a.beta1, 1.0 - a.beta2,        a.eps,          a.weight_decay,
          1.0 - a.lr * a.weight_decay,         a.decoupled,    a.amsgrad};
}

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const ops::SgdStepArgs& a) {
  OnDevice on(p.device().index);
  launch_sgd_step(p.dtype() == DType::f64, p.raw_data(), g.raw_data(), a.momentum != 0 ? buf.raw_data() : nullptr,
                  p.numel(), sgd_consts(a), on.stream());
  check_launch("sgd step");
}

void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const ops::AdamStepArgs& a) {
  OnDevice on(p.device().index);
  launch_adam_step(p.dtype() == DType::f64, p.raw_data(), g.raw_data(), m.raw_data(), v.raw_data(),
                   a.amsgrad ? vmax.raw_data() : nullptr, p.numel(), adam_consts(a), on.stream());
  check_launch("adam step");
}

// The list kernels' launches: the parameters (all of one device, checked
// by the front) by dtype, kMultiTensorMax a launch; lists[k] holds list k's
// tensors (empty: null pointers).
template <int kLists, typename Launch>
void for_each_param_group(const std::vector<Tensor>* const (&lists)[kLists], Launch launch) {
  const std::vector<Tensor>& params = *lists[0];
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<void*> ptrs[kLists];
    std::vector<int64_t> n;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].dtype() != dt || params[i].numel() == 0) continue;
      for (int k = 0; k < kLists; ++k)
        if (!lists[k]->empty()) ptrs[k].push_back((*lists[k])[i].raw_data());
      n.push_back(params[i].numel());
    }
    for (size_t i = 0; i < n.size(); i += kMultiTensorMax) {
      const int count = static_cast<int>(std::min<size_t>(kMultiTensorMax, n.size() - i));
      void* const* at[kLists];
      for (int k = 0; k < kLists; ++k) at[k] = ptrs[k].empty() ? nullptr : ptrs[k].data() + i;
      launch(dt == DType::f64, at, n.data() + i, count);
    }
  }
}

void multi_sgd_step(const ops::SgdStepLists& l, const ops::SgdStepArgs& a) {
  OnDevice on(l.params[0].device().index);
  const SgdConsts c = sgd_consts(a);
  const std::vector<Tensor>* const lists[3] = {&l.params, &l.grads, &l.momentum_bufs};
  for_each_param_group(lists, [&](bool f64, void* const* const* ptrs, const int64_t* n, int count) {
    launch_multi_sgd_step(f64, ptrs, n, count, c, on.stream());
  });
  check_launch("multi_tensor_sgd_step_");
}

void multi_adam_step(const ops::AdamStepLists& l, const ops::AdamStepArgs& a) {
  OnDevice on(l.params[0].device().index);
  const AdamConsts c = adam_consts(a);
  const std::vector<Tensor>* const lists[5] = {&l.params, &l.grads, &l.exp_avgs, &l.exp_avg_sqs,
                                               &l.max_exp_avg_sqs};
  for_each_param_group(lists, [&](bool f64, void* const* const* ptrs, const int64_t* n, int count) {
    launch_multi_adam_step(f64, ptrs, n, count, c, on.stream());
  });
  check_launch("multi_tensor_adam_step_");
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
  ops::multi_tensor_sgd_step_kernel.set(DeviceType::cuda, &multi_sgd_step);
  ops::multi_tensor_adam_step_kernel.set(DeviceType::cuda, &multi_adam_step);
  return true;
}();

}  // namespace

}  // namespace qk::cuda

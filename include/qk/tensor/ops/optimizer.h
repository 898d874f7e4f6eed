// Fused optimizer update kernels, one KernelTable per algorithm (as ATen
// holds _fused_adam): tensor ops, so every backend registers its own with
// its other kernels and any program that links a backend has them, whatever
// else it links (qk::optim's SGD and Adam call them; see qk/tensor/dispatch.h):
//
//   qk::ops::adam_step_kernel.set(qk::DeviceType::cuda, &my_cuda_adam_step);
//
// Each kernel updates one parameter in a single pass over its memory
// (param, grad and state are read once and written once); the CPU kernels
// are multi-threaded over elements. All tensors are contiguous, of the same
// shape, dtype (f32 or f64) and device; the optimizer front checks that.
#pragma once

#include <cstdint>

#include "qk/tensor/dispatch.h"
#include "qk/tensor/tensor.h"

namespace qk::ops {

// PyTorch's SGD: g = grad + weight_decay * p; with momentum,
// buf = first_step ? g : momentum * buf + (1 - dampening) * g, and
// g = nesterov ? g + momentum * buf : buf; then p -= lr * g.
struct SgdStepArgs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is uninitialised
};
// momentum_buf is undefined when momentum == 0.
using SgdStepFn = void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdStepArgs& args);

// PyTorch's Adam (decoupled = false: weight decay added to the gradient)
// and AdamW (decoupled = true: p *= 1 - lr * weight_decay first), with bias
// correction for step `step` (1-based) and optional AMSGrad.
struct AdamStepArgs {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;
  bool decoupled = false;
  bool amsgrad = false;
};
// max_exp_avg_sq is undefined unless amsgrad.
using AdamStepFn = void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                        const AdamStepArgs& args);

QK_DECLARE_KERNEL(sgd_step_kernel, SgdStepFn);
QK_DECLARE_KERNEL(adam_step_kernel, AdamStepFn);

}  // namespace qk::ops

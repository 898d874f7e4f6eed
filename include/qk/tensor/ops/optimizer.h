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
#include <vector>

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

// ---- the same steps over many parameters at once (torch's fused Adam over a
// parameter list): each parameter gets exactly the one-tensor kernel's
// arithmetic, in one launch per group of tensors on a GPU instead of one per
// parameter. The lists have one entry per parameter (the state lists empty
// where the one-tensor kernel takes an undefined tensor); every entry obeys
// the one-tensor kernel's rules, and all tensors are on one device (else a
// ValueError naming the index). Devices without a list kernel get the
// one-tensor kernel per parameter.
struct SgdStepLists {
  std::vector<Tensor> params, grads, momentum_bufs;  // momentum_bufs empty when momentum == 0
};
struct AdamStepLists {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;  // the last empty unless amsgrad
};
void multi_tensor_sgd_step_(const SgdStepLists& lists, const SgdStepArgs& args);
void multi_tensor_adam_step_(const AdamStepLists& lists, const AdamStepArgs& args);

using MultiTensorSgdStepFn = void(const SgdStepLists& lists, const SgdStepArgs& args);
using MultiTensorAdamStepFn = void(const AdamStepLists& lists, const AdamStepArgs& args);
QK_DECLARE_KERNEL(multi_tensor_sgd_step_kernel, MultiTensorSgdStepFn);
QK_DECLARE_KERNEL(multi_tensor_adam_step_kernel, MultiTensorAdamStepFn);

// ---- multi-tensor passes (apex's multi_tensor_applier, torch's _foreach_*)
// One pass over many tensors of one device: on a GPU a launch per group of
// tensors instead of one (or two, with a reduction) per tensor, and
// nothing read back by the op itself. Tensors: contiguous, f32, f64, bf16
// or f16 (mixed dtypes allowed), all on one device; an empty list is a
// ValueError, as is a tensor that breaks these rules (naming its index).

// The loss-scaling pass over gradients: each tensor is multiplied in place
// by `scale` (left alone at 1; 16-bit values through f32, as the CPU's
// conversions), and the result, on their device, is an f64 tensor [2]:
// the sum of the squares of the scaled values, and how many values were
// inf or NaN before scaling. Read it back once, for the whole step
// (Megatron's found_inf and get_grad_norm_fp32 over every parameter).
// Accumulates in f64 on the CPU; in f32 per block and f64 across blocks
// on CUDA (PyTorch's norms accumulate in f32).
Tensor multi_tensor_unscale_norm_(const std::vector<Tensor>& tensors, double scale);
// Each tensor multiplied by `scale` in place (gradient clipping).
void multi_tensor_scale_(const std::vector<Tensor>& tensors, double scale);

// The kernels: `out` is the f64 [2] result, zeroed, on the tensors' device.
using MultiTensorUnscaleNormFn = void(const std::vector<Tensor>& tensors, double scale, const Tensor& out);
using MultiTensorScaleFn = void(const std::vector<Tensor>& tensors, double scale);
QK_DECLARE_KERNEL(multi_tensor_unscale_norm_kernel, MultiTensorUnscaleNormFn);
QK_DECLARE_KERNEL(multi_tensor_scale_kernel, MultiTensorScaleFn);

}  // namespace qk::ops

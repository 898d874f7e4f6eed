// Autocast: mixed precision by op, as torch.autocast does it.
//
//   {
//     qk::autocast::Guard amp(qk::DType::bf16);   // or f16
//     Tensor loss = cross_entropy(model->forward(x), y);   // convs, linears in bf16
//   }
//   loss.backward();                              // gradients reach f32 weights
//
// Inside a Guard, the differentiable functions (qk/autograd/functions.h)
// apply one policy per op:
//   - low precision: conv2d, linear, mm, bmm, matmul run in the guard's
//     dtype (f32 inputs are cast down, through differentiable casts, so the
//     f32 master weights get f32 gradients);
//   - f32: softmax, log_softmax, the losses, layer/rms norm and the
//     sum/mean reductions take f16/bf16 inputs up to f32 (their sums and
//     exponentials lose too much in 8 mantissa bits);
//   - everything else runs in the dtype it is given, batch_norm included
//     (as in PyTorch's CPU autocast): its kernel accumulates in f32 and keeps
//     weight, bias and statistics in f32, so conv -> BN -> ReLU stays bf16.
// Casts of leaf tensors that require grad (the weights) are cached for the
// life of the outermost Guard, so a weight used twice is cast once.
// The state is per thread, like grad mode.
#pragma once

#include "qk/tensor/tensor.h"

namespace qk::autocast {

// True inside an enabled Guard on this thread.
bool is_enabled();
// The low-precision dtype of the innermost enabled Guard (bf16 or f16).
DType low_dtype();

class Guard {
 public:
  // dtype: bf16 or f16 (anything else throws). enabled=false turns autocast
  // off inside an outer Guard (e.g. for an op that must stay in f32).
  explicit Guard(DType dtype = DType::bf16, bool enabled = true);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

// The policy, for the differentiable functions (no-ops outside a Guard):
// floating tensors (f32/f16/bf16) to the low dtype, or reduced floats to f32.
Tensor to_low(const Tensor& t);
Tensor to_f32(const Tensor& t);

// Number of cached weight casts (tests).
size_t cache_size();

}  // namespace qk::autocast

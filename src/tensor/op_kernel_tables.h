// Kernel tables whose kernels take the tensor layer's own types (the public
// ones are in qk/tensor/kernel_tables.h): private to src/tensor, so a GPU
// backend folder inside it (cuda/) registers into them; a backend outside
// the layer sees only the public tables.
#pragma once

#include "cpu/kernels.h"
#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/tensor.h"

namespace qk::ops {

// out (contiguous, keepdim shape) <- op over `dims` (sorted, unique) of a;
// sums accumulate in f64 (floats) or i64 (integers, given as i64).
using ReduceFn = void(cpu::ReduceOp op, const Tensor& out, const Tensor& a, const Shape& dims);
QK_DECLARE_KERNEL(reduce_kernel, ReduceFn);

// (log_)softmax of contiguous x along dim; returns a contiguous tensor.
using SoftmaxFn = Tensor(const Tensor& x, int64_t dim, bool log);
// dx from grad and the forward output (both contiguous).
using SoftmaxBwdFn = Tensor(const Tensor& grad, const Tensor& out, int64_t dim, bool log);
QK_DECLARE_KERNEL(softmax_kernel, SoftmaxFn);
QK_DECLARE_KERNEL(softmax_backward_kernel, SoftmaxBwdFn);

// Cross entropy of contiguous logits [N, C, ...] and targets [N, ...] (i32
// or i64): the loss and the log-probabilities backward needs.
using CrossEntropyFn = CrossEntropyResult(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                          double label_smoothing, Reduction reduction);
// d loss / d logits from grad_loss (of the loss's shape and lp's dtype).
using CrossEntropyBwdFn = Tensor(const Tensor& grad_loss, const Tensor& log_probs, const Tensor& target,
                                 int64_t ignore_index, double label_smoothing, Reduction reduction);
QK_DECLARE_KERNEL(cross_entropy_kernel, CrossEntropyFn);
QK_DECLARE_KERNEL(cross_entropy_backward_kernel, CrossEntropyBwdFn);

// 2-D pooling of contiguous x [N, C, H, W] to [N, C, ho, wo] (sizes checked
// by the fronts, src/tensor/pool.cc), and the backward from contiguous
// grad_out (max: from the forward's i64 indices, flat within each plane).
using MaxPoolFn = std::pair<Tensor, Tensor>(const Tensor& x, const Pool2dParams& p, int64_t ho, int64_t wo);
using MaxPoolBwdFn = Tensor(const Tensor& grad_out, const Tensor& x, const Tensor& indices);
using AvgPoolFn = Tensor(const Tensor& x, const Pool2dParams& p, int64_t ho, int64_t wo);
using AvgPoolBwdFn = Tensor(const Tensor& grad_out, const Tensor& x, const Pool2dParams& p);
using AdaptivePoolFn = Tensor(const Tensor& x, std::array<int64_t, 2> out_size);
using AdaptivePoolBwdFn = Tensor(const Tensor& grad_out, const Tensor& x);
QK_DECLARE_KERNEL(max_pool2d_kernel, MaxPoolFn);
QK_DECLARE_KERNEL(max_pool2d_backward_kernel, MaxPoolBwdFn);
QK_DECLARE_KERNEL(avg_pool2d_kernel, AvgPoolFn);
QK_DECLARE_KERNEL(avg_pool2d_backward_kernel, AvgPoolBwdFn);
QK_DECLARE_KERNEL(adaptive_avg_pool2d_kernel, AdaptivePoolFn);
QK_DECLARE_KERNEL(adaptive_avg_pool2d_backward_kernel, AdaptivePoolBwdFn);

// Batch norm of contiguous x [N, C, ...] (weight, bias, running stats [C]
// or undefined): out, and the mean and 1/std backward needs (f32, f64 for
// f64); running stats updated in place in training.
using BatchNormFn = BatchNormResult(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    double momentum, double eps);
// dx, dweight (undefined without weight), dbias from contiguous grad_out and x.
using BatchNormBwdFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor& grad_out, const Tensor& x,
                                                          const Tensor& weight, const Tensor& save_mean,
                                                          const Tensor& save_invstd, bool training);
QK_DECLARE_KERNEL(batch_norm_kernel, BatchNormFn);
QK_DECLARE_KERNEL(batch_norm_backward_kernel, BatchNormBwdFn);

// Inverted dropout of contiguous x with Philox(seed, offset + i / 4):
// (out, mask), the mask 0 or 1/(1-p) in x's dtype.
using DropoutFn = std::pair<Tensor, Tensor>(const Tensor& x, double p, uint64_t seed, uint64_t offset);
QK_DECLARE_KERNEL(dropout_kernel, DropoutFn);

// dx <- grad * op'(x) (y = op(x); either may be undefined when the
// derivative does not need it).
using UnaryBwdFn = void(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x, const Tensor& y);
QK_DECLARE_KERNEL(unary_backward_kernel, UnaryBwdFn);

// self += alpha * other (other broadcast to self's shape).
using AddInplaceFn = void(const Tensor& self, const Tensor& other, double alpha);
QK_DECLARE_KERNEL(add_inplace_kernel, AddInplaceFn);

}  // namespace qk::ops

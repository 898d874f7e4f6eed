// Kernel tables whose kernels take the tensor layer's own types (the public
// ones are in qk/tensor/kernel_tables.h): private to src/tensor, so a GPU
// backend folder inside it (cuda/) registers into them; a backend outside
// the layer sees only the public tables.
#pragma once

#include "cpu/kernels.h"
#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/nn.h"
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

// dx <- grad * op'(x) (y = op(x); either may be undefined when the
// derivative does not need it).
using UnaryBwdFn = void(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x, const Tensor& y);
QK_DECLARE_KERNEL(unary_backward_kernel, UnaryBwdFn);

// self += alpha * other (other broadcast to self's shape).
using AddInplaceFn = void(const Tensor& self, const Tensor& other, double alpha);
QK_DECLARE_KERNEL(add_inplace_kernel, AddInplaceFn);

}  // namespace qk::ops

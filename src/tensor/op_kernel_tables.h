// Kernel tables whose kernels take the tensor layer's own types (the public
// ones are in qk/tensor/kernel_tables.h): private to src/tensor, so a GPU
// backend folder inside it (cuda/) registers into them; a backend outside
// the layer sees only the public tables.
#pragma once

#include "cpu/kernels.h"
#include "qk/tensor/dispatch.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/llm.h"
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
// The same for a channels-last x or grad_out (memory_format.h; x of a
// backward gives only the shape), giving channels-last results, where a
// device has kernels for that layout; the front goes through NCHW on the others.
QK_DECLARE_KERNEL(max_pool2d_channels_last_kernel, MaxPoolFn);
QK_DECLARE_KERNEL(max_pool2d_channels_last_backward_kernel, MaxPoolBwdFn);
QK_DECLARE_KERNEL(avg_pool2d_channels_last_kernel, AvgPoolFn);
QK_DECLARE_KERNEL(avg_pool2d_channels_last_backward_kernel, AvgPoolBwdFn);

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
// The same for a channels-last x and grad_out (memory_format.h), giving
// channels-last out and dx, where a device has kernels for that layout; the
// front composes it from reductions on the others (batch_norm_channels_last.h).
QK_DECLARE_KERNEL(batch_norm_channels_last_kernel, BatchNormFn);
QK_DECLARE_KERNEL(batch_norm_channels_last_backward_kernel, BatchNormBwdFn);

// Inverted dropout of contiguous x with Philox(seed, offset + i / 4):
// (out, mask), the mask 0 or 1/(1-p) in x's dtype. offset_base, when
// defined (an i64 [1] on x's device, read when the kernel runs), is added to
// offset: a recorded graph's counters move on at each replay (graph_rng.h).
using DropoutFn = std::pair<Tensor, Tensor>(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                            const Tensor& offset_base);
QK_DECLARE_KERNEL(dropout_kernel, DropoutFn);

// dx <- grad * op'(x) (y = op(x); either may be undefined when the
// derivative does not need it).
using UnaryBwdFn = void(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x, const Tensor& y);
QK_DECLARE_KERNEL(unary_backward_kernel, UnaryBwdFn);

// self += alpha * other (other broadcast to self's shape).
using AddInplaceFn = void(const Tensor& self, const Tensor& other, double alpha);
QK_DECLARE_KERNEL(add_inplace_kernel, AddInplaceFn);

// ---- the rest of the CPU backend's tables (src/tensor/*.cc define them; the
// CPU kernels' headers in cpu/ state each contract in full) ----------------

// out <- clamp(a, lo, hi) (a broadcast to out); dx <- grad where lo <= x <= hi, else 0.
using ClampFn = void(const Tensor& out, const Tensor& a, std::optional<double> lo, std::optional<double> hi);
using ClampBwdFn = void(const Tensor& dx, const Tensor& grad, const Tensor& x, std::optional<double> lo,
                        std::optional<double> hi);
// out <- cond ? a : b (all broadcast to out; cond bool).
using WhereFn = void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
QK_DECLARE_KERNEL(clamp_kernel, ClampFn);
QK_DECLARE_KERNEL(clamp_backward_kernel, ClampBwdFn);
QK_DECLARE_KERNEL(where_kernel, WhereFn);

// values and indices (i64) <- max or min of a along dim (keepdim shape;
// first occurrence wins, NaN propagates as the CPU's cpu::max_min_dim).
using MaxMinDimFn = void(bool is_max, const Tensor& values, const Tensor& indices, const Tensor& a, int64_t dim);
QK_DECLARE_KERNEL(max_min_dim_kernel, MaxMinDimFn);

// Layer norm of contiguous x viewed as [M, D] (D = product of
// normalized_shape): (out, mean, rstd) with the statistics in x's leading
// shape, normalized dims kept as 1, in the accumulation type (f32; f64 for
// f64); weight and bias [D] or undefined. Backward: (dx, dweight, dbias),
// the latter two undefined without weight and bias (cpu/norm.h).
using LayerNormFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor& x, const Shape& normalized_shape,
                                                       const Tensor& weight, const Tensor& bias, double eps);
using LayerNormBwdFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor& grad_out, const Tensor& x,
                                                          const Shape& normalized_shape, const Tensor& mean,
                                                          const Tensor& rstd, const Tensor& weight);
// RMS norm likewise: (out, rstd); backward (dx, dweight).
using RmsNormFn = std::pair<Tensor, Tensor>(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                            double eps);
using RmsNormBwdFn = std::pair<Tensor, Tensor>(const Tensor& grad_out, const Tensor& x,
                                               const Shape& normalized_shape, const Tensor& rstd,
                                               const Tensor& weight);
QK_DECLARE_KERNEL(layer_norm_kernel, LayerNormFn);
QK_DECLARE_KERNEL(layer_norm_backward_kernel, LayerNormBwdFn);
QK_DECLARE_KERNEL(rms_norm_kernel, RmsNormFn);
QK_DECLARE_KERNEL(rms_norm_backward_kernel, RmsNormBwdFn);

// Embedding rows of contiguous weight [V, D] at contiguous i32/i64 indices
// (out of range: IndexError); backward sums grad rows into [num_weights, D],
// skipping padding_idx (negative: none).
using EmbeddingFn = Tensor(const Tensor& weight, const Tensor& indices);
using EmbeddingBwdFn = Tensor(const Tensor& grad, const Tensor& indices, int64_t num_weights, int64_t padding_idx);
QK_DECLARE_KERNEL(embedding_kernel, EmbeddingFn);
QK_DECLARE_KERNEL(embedding_backward_kernel, EmbeddingBwdFn);

// Rotary embedding of x [B, T, H, D] (D contiguous, any outer strides) with
// contiguous cos, sin [T, R]: cpu/rotary.h. SwiGLU of contiguous [..., 2F]
// -> [..., F], and its backward: cpu/swiglu.h. Linear + cross entropy:
// cpu/linear_cross_entropy.h.
using RotaryFn = Tensor(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward);
using SwigluFn = Tensor(const Tensor& x);
using SwigluBwdFn = Tensor(const Tensor& grad, const Tensor& x);
using LinearCrossEntropyFn = LinearCrossEntropyResult(const Tensor& hidden, const Tensor& weight,
                                                      const Tensor& target, const Tensor& token_weight,
                                                      const LinearCrossEntropyOptions& o);
QK_DECLARE_KERNEL(rotary_embedding_kernel, RotaryFn);
QK_DECLARE_KERNEL(swiglu_kernel, SwigluFn);
QK_DECLARE_KERNEL(swiglu_backward_kernel, SwigluBwdFn);
QK_DECLARE_KERNEL(linear_cross_entropy_kernel, LinearCrossEntropyFn);

// Joining and indexing of contiguous tensors, dims wrapped, index values
// range-checked by the kernel (IndexError naming the op): cpu/index.h.
using CatFn = Tensor(const std::vector<Tensor>& tensors, int64_t dim, const Shape& out_shape);
using IndexSelectFn = Tensor(const Tensor& a, int64_t dim, const Tensor& index);  // also gather
using IndexAddFn = Tensor(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);  // also scatter_add
using TopkFn = std::pair<Tensor, Tensor>(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted);
using OneHotFn = Tensor(const Tensor& index, int64_t num_classes);
QK_DECLARE_KERNEL(cat_kernel, CatFn);
QK_DECLARE_KERNEL(index_select_kernel, IndexSelectFn);
QK_DECLARE_KERNEL(index_add_kernel, IndexAddFn);
QK_DECLARE_KERNEL(gather_kernel, IndexSelectFn);
QK_DECLARE_KERNEL(scatter_add_kernel, IndexAddFn);
QK_DECLARE_KERNEL(topk_kernel, TopkFn);
QK_DECLARE_KERNEL(one_hot_kernel, OneHotFn);

// Grouped products of contiguous operands (MoE experts): cpu/grouped_gemm.h.
using GroupedMmFn = Tensor(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b,
                           bool trans_b, const std::vector<Tensor>& bias);
using GroupedMmTnFn = std::vector<Tensor>(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows);
QK_DECLARE_KERNEL(grouped_mm_kernel, GroupedMmFn);
QK_DECLARE_KERNEL(grouped_mm_tn_kernel, GroupedMmTnFn);

}  // namespace qk::ops

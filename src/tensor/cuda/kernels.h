// The CUDA backend's kernels (*.cu), launched on the given stream. Plain data
// only: the .cu files are compiled by nvcc as C++17 and include no qianka
// header but reduce_plan.h (plain C++17); the C++20 glue (elementwise_ops.cc) turns tensors into these.
#pragma once

#include "reduce_plan.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace qk::cuda {

// dtype codes: qk::DType's values (static_asserts in elementwise_ops.cc).
enum DtypeCode : int { kF32 = 0, kF64, kF16, kBF16, kI32, kI64, kU8, kBool };

// An elementwise loop over `numel` elements in the row-major order of
// sizes[0..ndim), with each operand's strides in elements (0 where it is
// broadcast). Operand 0 is the output.
constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;
struct ElementwiseLayout {
  int ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

// Fills n elements of `size` bytes each (1, 2, 4 or 8) at dst, contiguous,
// with the bit pattern `bits` (the value already converted to the dtype).
void launch_fill(void* dst, int64_t n, size_t size, uint64_t bits, cudaStream_t stream);
// dst <- src converted to dst's dtype (operands 0 and 1 of the layout).
void launch_copy(void* dst, int dst_dtype, const void* src, int src_dtype, const ElementwiseLayout& l,
                 cudaStream_t stream);
// out <- a op b, op a qk::BinaryOp value; a and b of `dtype`, out of `dtype`
// or bool for the comparisons (eq and after). Operands: out, a, b.
void launch_binary(int op, void* out, const void* a, const void* b, int dtype, const ElementwiseLayout& l,
                   cudaStream_t stream);
// out <- a op b for a scalar b of `dtype` whose bytes are b_bits' first
// (as launch_fill takes them). Operands: out, a (out may be a).
void launch_binary_scalar(int op, void* out, const void* a, uint64_t b_bits, int dtype, const ElementwiseLayout& l,
                          cudaStream_t stream);
// out <- op(a), op a qk::UnaryOp value, both of `dtype`. Operands: out, a.
void launch_unary(int op, void* out, const void* a, int dtype, const ElementwiseLayout& l, cudaStream_t stream);
// dx <- grad * op'(x) (y = op(x)), all of floating `dtype`. Operands: dx, grad, x, y.
void launch_unary_backward(int op, void* dx, const void* grad, const void* x, const void* y, int dtype,
                           const ElementwiseLayout& l, cudaStream_t stream);
// self <- self + alpha * other, of `dtype` (not bool). Operands: self, other.
void launch_add_inplace(void* self, const void* other, int dtype, double alpha, const ElementwiseLayout& l,
                        cudaStream_t stream);

// Row reductions of a contiguous [rows, n] matrix (n >= 1) into out[rows]:
// op 0 sum, 1 mean, 2 amax, 3 amin (qk::cpu::ReduceOp). Floats accumulate in
// f64, integers in i64; amax and amin propagate NaN.
// out [outer, inner] = op over the middle of a contiguous [outer, n, inner]
// `a` (op: cpu::ReduceOp's value), in plan.splits parts; `partial` holds
// outer * inner * plan.splits accumulators (i64 for integer dtypes, else
// f64) when plan.splits > 1 (reduce_plan.h; reduce_ops.h does all of it).
void launch_reduce(int op, void* out, const void* a, int dtype, const ReduceShape& shape, const ReducePlan& plan,
                   void* partial, cudaStream_t stream);
// (log_)softmax of each row of a contiguous [rows, n] matrix, of floating dtype.
void launch_softmax_rows(void* y, const void* x, int dtype, int64_t rows, int64_t n, bool log, cudaStream_t stream);
// Its backward from grad and the forward output y.
void launch_softmax_backward_rows(void* dx, const void* grad, const void* y, int dtype, int64_t rows, int64_t n,
                                  bool log, cudaStream_t stream);

// 2-D pooling (pool.cu) over planes of [h, w] -> [ho, wo], NCHW contiguous.
enum class PoolKind : int { kMax, kAvg, kAdaptiveAvg };
struct PoolGeometry {
  int64_t h, w, ho, wo;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;  // unused for adaptive
};
// Forward: out [planes, ho, wo] from in [planes, h, w] (max: indices, i64, of
// the same shape as out, written). Backward: out = dx [planes, h, w] from
// in = dy [planes, ho, wo]; max reads the forward's indices and adds into
// out, zeroed, of f32 (f64 for f64) whatever the dtype.
void launch_pool(PoolKind kind, bool backward, void* out, const void* in, void* indices, int dtype, int64_t planes,
                 const PoolGeometry& g, bool count_include_pad, cudaStream_t stream);

// Inverted dropout of n contiguous elements (dropout.cu) with the CPU's
// Philox stream: out and mask (0 or 1/(1-p)) of x's floating dtype.
void launch_dropout(void* out, void* mask, const void* x, int dtype, int64_t n, double p, uint64_t seed,
                    uint64_t offset, const int64_t* offset_base, cudaStream_t stream);

// Cross entropy (loss.cu) over lp [N, C, S] contiguous and targets [N, S]:
// per[p] and on[p] (1 where position p counts) for every position; *bad gets
// the first out-of-range target's position + 1 (start it at ~0: an atomicMin).
void launch_cross_entropy_positions(double* per, int64_t* on, const void* lp, int dtype, const void* target,
                                    int target_dtype, int64_t N, int64_t C, int64_t S, int64_t ignore_index,
                                    double label_smoothing, unsigned long long* bad, cudaStream_t stream);
// out (one element of dtype) <- *total / *count (mean) or *total.
void launch_cross_entropy_finish(void* out, int dtype, const double* total, const int64_t* count, bool mean,
                                 cudaStream_t stream);
// out[i] <- in[i] for n f64 values, converted to floating dtype.
void launch_f64_to(void* out, int dtype, const double* in, int64_t n, cudaStream_t stream);
// dx [N, C, S] from lp, targets and grad (one value, or one per position);
// *count: the counted positions (read for mean).
void launch_cross_entropy_backward(void* dx, const void* lp, int dtype, const void* target, int target_dtype,
                                   const void* grad, bool grad_per_position, const int64_t* count, bool mean,
                                   int64_t N, int64_t C, int64_t S, int64_t ignore_index, double label_smoothing,
                                   unsigned long long* bad, cudaStream_t stream);

}  // namespace qk::cuda

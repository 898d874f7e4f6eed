// Megatron's tensor-parallel mappings (megatron/core/tensor_parallel/mappings.py)
// as differentiable functions: each moves activations into or out of a
// tensor-parallel region in forward and does the conjugate in backward.
//
//   using namespace qk::parallel;
//   Tensor x_tp = copy_to_tensor_model_parallel_region(x, tp);        // id fwd, all-reduce bwd
//   Tensor y = linear(x_tp, w_shard);                                 // [.., out/tp]
//   Tensor z = reduce_from_tensor_model_parallel_region(partial, tp);  // all-reduce fwd, id bwd
//   Tensor full = gather_from_tensor_model_parallel_region(y, tp);     // cat last dim fwd, split bwd
//
// Sequence parallelism shards activations along the sequence dim (`dim`;
// Megatron's [s, b, h] has it first, qianka's [B, T, C] second):
//   Tensor h_sp = scatter_to_sequence_parallel_region(h, tp, 1);     // [B, T/tp, C]
//   Tensor h_full = gather_from_sequence_parallel_region(h_sp, tp, 1);  // all-gather fwd, reduce-scatter bwd
//   Tensor out_sp = reduce_scatter_to_sequence_parallel_region(partial, tp, 1);
//
// A group of size 1 makes each an identity. Every rank of the group must make
// the same calls in the same order (they are collectives, in backward too).
// The group must outlive the autograd graph (modules hold it by shared_ptr).
#pragma once

#include "qk/dist/process_group.h"
#include "qk/tensor/tensor.h"

namespace qk::parallel {

// Identity forward; gradients all-reduced (sum) over the group in backward.
Tensor copy_to_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp);
// All-reduce (sum) forward; identity backward.
Tensor reduce_from_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp);
// Keeps this rank's slice of the last dim (size divisible by the group);
// backward all-gathers the gradient along it.
Tensor scatter_to_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp);
// Concatenates every rank's x along the last dim; backward keeps this rank's slice.
Tensor gather_from_tensor_model_parallel_region(const Tensor& x, dist::ProcessGroup& tp);

// Keeps this rank's slice of `dim`; backward all-gathers along it.
Tensor scatter_to_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim);
// All-gathers along `dim`. Backward: reduce-scatter of the gradient when the
// consumer is tensor-parallel (each rank holds a partial gradient of the whole
// sequence: Megatron's tensor_parallel_output_grad=True), else this rank's slice.
Tensor gather_from_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim,
                                            bool tensor_parallel_output_grad = true);
// Sums over the group and keeps this rank's slice of `dim`; backward all-gathers.
Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, dist::ProcessGroup& tp, int64_t dim);

// The raw collectives the mappings use (no autograd), for callers that build
// their own backward: every rank's x concatenated along `dim`; the sum over
// the group of x, sliced along `dim`; this rank's slice of `dim` (a copy).
Tensor all_gather_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim);
Tensor reduce_scatter_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim);
Tensor slice_along(const Tensor& x, dist::ProcessGroup& g, int64_t dim);

}  // namespace qk::parallel

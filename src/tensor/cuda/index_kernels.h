// The CUDA backend's selection and indexing kernels (select.cu, index.cu,
// topk.cu): plain-data launch functions on the given stream, as kernels.h.
// The C++20 glue (select_ops.cc, index_ops.cc) takes tensors apart, checks
// what the CPU checks and allocates outputs and workspaces.
//
// Index errors: a kernel that meets an index out of range does not read or
// write through it and lowers *bad (an atomicMin) to the index's position +
// 1; the glue starts *bad at all ones and reads it back once per call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace qk::cuda {

// ---- select.cu: clamp, where, max/min along a dim ------------------------

// clamp's bounds, already converted on the host as the CPU converts them
// (static_cast to the dtype's compute type): f for floating dtypes, i for
// integer ones.
struct ClampBounds {
  bool has_lo = false, has_hi = false;
  double lo_f = 0, hi_f = 0;
  int64_t lo_i = 0, hi_i = 0;
};
// out <- clamp(a) of numeric `dtype`. Operands: out, a.
void launch_clamp(void* out, const void* a, int dtype, const ClampBounds& b, const ElementwiseLayout& l,
                  cudaStream_t stream);
// dx <- lo <= x <= hi ? grad : 0 (compared in f64), dx and grad of floating
// `dtype`, x of x_dtype. Operands: dx, grad, x.
void launch_clamp_backward(void* dx, const void* grad, const void* x, int dtype, int x_dtype, double lo, double hi,
                           const ElementwiseLayout& l, cudaStream_t stream);
// out <- cond ? a : b, elements of `itemsize` bytes (1, 2, 4 or 8) copied as
// bits. Operands: out, cond (bool), a, b.
void launch_where(void* out, const void* cond, const void* a, const void* b, size_t itemsize,
                  const ElementwiseLayout& l, cudaStream_t stream);
// values[o, i] and indices[o, i] (i64) <- max or min of contiguous a viewed
// as [outer, n, inner] (n >= 1) along n: the first NaN if there is one, else
// the first occurrence of the extreme (cpu::max_min_dim's scan).
void launch_max_min_dim(bool is_max, void* values, int64_t* indices, const void* a, int dtype, int64_t outer,
                        int64_t n, int64_t inner, cudaStream_t stream);

// ---- index.cu: cat, index_select, index_add, gather, scatter_add, one_hot --

// One input of cat: `bytes` per outer row, placed at byte `at` of each of
// the output's rows.
struct CatPiece {
  const void* src = nullptr;
  int64_t bytes = 0, at = 0;
};
// out [outer, row_bytes] <- the pieces side by side (pieces of 0 bytes skipped).
void launch_cat(void* out, const CatPiece* pieces, int64_t count, int64_t outer, int64_t row_bytes,
                cudaStream_t stream);

// *bad <- the first position + 1 of k index values (i32 or i64) outside [0, size).
void launch_check_indices(const void* index, int index_dtype, int64_t k, int64_t size, unsigned long long* bad,
                          cudaStream_t stream);

// out [outer, k, inner] <- a [outer, n, inner] at index[0..k) along n,
// elements of `itemsize` bytes; indices out of range are skipped (checked
// by launch_check_indices).
void launch_index_select(void* out, const void* a, size_t itemsize, const void* index, int index_dtype,
                         int64_t outer, int64_t n, int64_t inner, int64_t k, cudaStream_t stream);

// index_add: out [outer, n, inner] (a's copy, numeric `dtype`) += src
// [outer, k, inner] at index[0..k) along n. The index positions are sorted
// by target (stably, so each target's sources stay in source order) and
// one thread per output element adds its sources in that order, in the
// compute type (f32 for f16/bf16), from a's value, rounded once: the CPU's
// sums, bit for bit. Checks the indices (*bad) whatever the sizes. The
// workspace: index_add_workspace(k, n) bytes.
size_t index_add_workspace(int64_t k, int64_t n);
void launch_index_add(void* out, const void* src, int dtype, const void* index, int index_dtype, int64_t outer,
                      int64_t n, int64_t inner, int64_t k, void* workspace, size_t workspace_bytes,
                      unsigned long long* bad, cudaStream_t stream);

// gather and scatter_add walk the index tensor (contiguous, of `sizes`) and
// address the indexed tensor (a) and src with their own strides; dims of
// size 1 dropped and neighbours merged by the glue.
constexpr int kMaxIndexDims = 16;
struct GatherLayout {
  int ndim = 0;
  int dim = 0;            // the indexed dim, among the ndim
  int64_t numel = 0;      // of the index
  int64_t dim_size = 0;   // a's size along dim (valid indices: [0, dim_size))
  int64_t sizes[kMaxIndexDims] = {};
  int64_t a_strides[kMaxIndexDims] = {};
  int64_t s_strides[kMaxIndexDims] = {};  // scatter_add: src's
};
// out (contiguous, the index's shape) <- a at the index, `itemsize` bytes.
void launch_gather(void* out, const void* a, size_t itemsize, const void* index, int index_dtype,
                   const GatherLayout& l, unsigned long long* bad, cudaStream_t stream);

// scatter_add, out (a's copy) += src at the index, each output element's
// sources added in the CPU's order (increasing position along dim). Two
// ways, the same sums:
//  * by lines: one thread per line of the index along dim (the lines write
//    disjoint outputs), walking it in order; out of the compute type (the
//    glue gives f16/bf16 an f32 copy, as the CPU), src of src_dtype;
//  * sorted: index positions sorted stably by destination, one thread per
//    destination adds its run in order from a's value in the compute type
//    and rounds once; out of src's dtype; workspace:
//    scatter_add_sort_workspace(numel of the index, out_numel).
// Lines when they are many or short (not measured); else sorted.
inline bool scatter_add_by_lines(const GatherLayout& l) {
  const int64_t n = l.sizes[l.dim], lines = n == 0 ? 0 : l.numel / n;
  return n <= 64 || lines >= 32768;
}
void launch_scatter_add_lines(void* out, int out_dtype, const void* src, int src_dtype, const void* index,
                              int index_dtype, const GatherLayout& l, unsigned long long* bad, cudaStream_t stream);
size_t scatter_add_sort_workspace(int64_t numel, int64_t out_numel);
void launch_scatter_add_sorted(void* out, const void* src, int dtype, const void* index, int index_dtype,
                               const GatherLayout& l, int64_t out_numel, void* workspace, size_t workspace_bytes,
                               unsigned long long* bad, cudaStream_t stream);

// out [m, num_classes] (i64) <- 0, then 1 at each index.
void launch_one_hot(int64_t* out, const void* index, int index_dtype, int64_t m, int64_t num_classes,
                    unsigned long long* bad, cudaStream_t stream);

// ---- topk.cu -------------------------------------------------------------

// values and indices [rows, k] <- the k best of each row of contiguous a
// [rows, n] (numeric dtype), best first: NaN above every number, then the
// largest (or smallest) value, ties to the lower index (cpu/topk.cc). Each
// row is sorted stably by a key that orders values so; workspace:
// topk_workspace(...) bytes.
size_t topk_workspace(int dtype, int64_t rows, int64_t n);
void launch_topk(void* values, int64_t* indices, const void* a, int dtype, int64_t rows, int64_t n, int64_t k,
                 bool largest, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace qk::cuda

// Strided N-d iteration for elementwise kernels (a small TensorIterator).
//
//   for_each_row<3>(out.shape(), {out, a, b},
//                   [&](char* const* p, const int64_t* s, int64_t n) { ... });
//
// Operands are broadcast to `shape` (stride 0 on broadcast dims), dims that
// are contiguous for every operand are merged, and `row` is called for each
// innermost row with the operands' base pointers and their inner strides in
// elements. Rows are split across the thread pool. When every operand is
// contiguous (or a scalar), a row covers the whole tensor in one call.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/tensor.h"

namespace qk::cpu {

// Rows per parallel task for rows of `row_len` elements: about 16K elements a task.
inline int64_t row_grain(int64_t row_len) { return row_len >= 16384 ? 1 : 16384 / (row_len > 0 ? row_len : 1); }

// Strides of `t` broadcast to `shape` (0 on broadcast dims); t's dims align right.
Shape broadcast_strides(const Tensor& t, const Shape& shape);

template <int N>
struct StridedLayout {
  Shape shape;                      // coalesced
  std::array<Shape, N> strides;     // elements, per operand
  std::array<char*, N> base;        // first element of each operand
  std::array<int64_t, N> itemsize;
};

template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<Tensor, N>& ops) {
  StridedLayout<N> L;
  for (int k = 0; k < N; ++k) {
    L.strides[k] = broadcast_strides(ops[k], shape);
    L.base[k] = static_cast<char*>(ops[k].raw_data());
    L.itemsize[k] = static_cast<int64_t>(ops[k].itemsize());
  }
  // Drop size-1 dims; order the rest as operand 0 (the output) lies in
  // memory, outermost first (a channels-last output is walked [N, H, W, C],
  // not with a stride-C innermost loop; a contiguous one keeps its order);
  // then merge dim i into i+1 when contiguous for all operands.
  Shape sh;
  std::array<Shape, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    sh.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(L.strides[k][d]);
  }
  // A stable insertion sort by operand 0's strides, in place: nothing moves
  // (and nothing is allocated) when they already descend, the usual case.
  for (size_t i = 1; i < sh.size(); ++i)
    for (size_t j = i; j > 0 && st[0][j - 1] < st[0][j]; --j) {
      std::swap(sh[j - 1], sh[j]);
      for (int k = 0; k < N; ++k) std::swap(st[k][j - 1], st[k][j]);
    }
  Shape msh;
  std::array<Shape, N> mst;
  for (size_t d = 0; d < sh.size(); ++d) {
    if (!msh.empty()) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (mst[k].back() != st[k][d] * sh[d]) mergeable = false;
      if (mergeable) {
        msh.back() *= sh[d];
        for (int k = 0; k < N; ++k) mst[k].back() = st[k][d];
        continue;
      }
    }
    msh.push_back(sh[d]);
    for (int k = 0; k < N; ++k) mst[k].push_back(st[k][d]);
  }
  if (msh.empty()) {  // scalar
    msh.push_back(1);
    for (int k = 0; k < N; ++k) mst[k].push_back(0);
  }
  L.shape = std::move(msh);
  L.strides = std::move(mst);
  return L;
}

// Calls row(ptrs, inner_strides, n) over every innermost row, in parallel.
// `grain_elems` is the minimum work (elements) per chunk (the default: not
// measured; docs/tensor.md, "Threads").
template <int N, typename Row>
void for_each_row(const StridedLayout<N>& L, Row&& row, int64_t grain_elems = 32768) {
  const int64_t nd = static_cast<int64_t>(L.shape.size());
  const int64_t inner = L.shape[nd - 1];
  int64_t outer = 1;
  for (int64_t d = 0; d < nd - 1; ++d) outer *= L.shape[d];
  std::array<int64_t, N> inner_st;
  for (int k = 0; k < N; ++k) inner_st[k] = L.strides[k][nd - 1];

  auto run_rows = [&](int64_t lo, int64_t hi) {
    // Offsets of row `lo`, then advanced like an odometer.
    Shape idx(static_cast<size_t>(std::max<int64_t>(nd - 1, 0)), 0);
    int64_t r = lo;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = r % L.shape[d];
      r /= L.shape[d];
    }
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) {
      int64_t off = 0;
      for (int64_t d = 0; d < nd - 1; ++d) off += idx[d] * L.strides[k][d];
      p[k] = L.base[k] + off * L.itemsize[k];
    }
    for (int64_t row_i = lo; row_i < hi; ++row_i) {
      row(p.data(), inner_st.data(), inner);
      for (int64_t d = nd - 2; d >= 0; --d) {
        ++idx[d];
        for (int k = 0; k < N; ++k) p[k] += L.strides[k][d] * L.itemsize[k];
        if (idx[d] < L.shape[d]) break;
        for (int k = 0; k < N; ++k) p[k] -= L.strides[k][d] * L.shape[d] * L.itemsize[k];
        idx[d] = 0;
      }
    }
  };

  if (outer == 1) {
    // One long row: split the row itself.
    parallel_for(0, inner, grain_elems, [&](int64_t lo, int64_t hi) {
      std::array<char*, N> p;
      for (int k = 0; k < N; ++k) p[k] = L.base[k] + lo * inner_st[k] * L.itemsize[k];
      row(p.data(), inner_st.data(), hi - lo);
    });
    return;
  }
  int64_t grain_rows = std::max<int64_t>(1, grain_elems / std::max<int64_t>(inner, 1));
  parallel_for(0, outer, grain_rows, run_rows);
}

}  // namespace qk::cpu

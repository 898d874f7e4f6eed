// The multi-tensor launches' argument (apex's multi_tensor_applier): up to
// kMultiTensorMax tensors' pointers (kLists per tensor: a parameter and its
// gradient and state) and sizes travel in the kernel's arguments; each
// block takes one chunk of kChunk elements of one tensor.
#pragma once

#include <cstdint>

#include "multi_tensor.h"

namespace qk::cuda {

// Elements per block: enough work per block to amortise its start (and to
// make the reductions' atomics rare).
inline constexpr int64_t kMultiTensorChunk = 1 << 14;

template <int kLists>
struct ChunkedTensorList {
  void* data[kLists][kMultiTensorMax];
  int64_t n[kMultiTensorMax];
  int64_t first_chunk[kMultiTensorMax + 1];  // prefix sums of the tensors' chunks
  int count;
};
// Kernel arguments are at most 4 KiB.
static_assert(sizeof(ChunkedTensorList<5>) <= 4096);

// Fills `l` with `count` tensors (ptrs[k][i]: list k's pointer of tensor
// i) and returns the number of chunks, the launch's blocks.
template <int kLists>
int64_t make_chunked_list(void* const* const* ptrs, const int64_t* n, int count, ChunkedTensorList<kLists>& l) {
  l.count = count;
  l.first_chunk[0] = 0;
  for (int i = 0; i < count; ++i) {
    for (int k = 0; k < kLists; ++k) l.data[k][i] = ptrs[k] ? ptrs[k][i] : nullptr;
    l.n[i] = n[i];
    l.first_chunk[i + 1] = l.first_chunk[i] + (n[i] + kMultiTensorChunk - 1) / kMultiTensorChunk;
  }
  return l.first_chunk[count];
}

// The tensor and element range [*lo, *hi) of this block's chunk.
template <int kLists>
__device__ __forceinline__ int tensor_of_block(const ChunkedTensorList<kLists>& l, int64_t* lo, int64_t* hi) {
  const int64_t b = blockIdx.x;
  int t = 0;
  while (t + 1 < l.count && l.first_chunk[t + 1] <= b) ++t;
  *lo = (b - l.first_chunk[t]) * kMultiTensorChunk;
  *hi = *lo + kMultiTensorChunk < l.n[t] ? *lo + kMultiTensorChunk : l.n[t];
  return t;
}

}  // namespace qk::cuda

// Embedding on CUDA (the CPU's: src/tensor/cpu/embedding.cc).
//
// Forward: a row copy of any dtype, in the widest word (16 bytes down to 1)
// that divides the row and both rows' alignment. An index outside [0, V)
// copies nothing and leaves its position in *bad (atomicMin of position + 1)
// for the host to raise IndexError, as loss.cu does for targets.
//
// Backward, deterministic without float atomics: the positions are sorted
// by row with CUB's radix sort, which is stable, so each row's positions
// stay in increasing order; then one thread block per run of equal rows
// (found by comparing a sorted key with its predecessor) sums that run's
// grad rows column by column in A (f32 for f16/bf16, rounded once at the
// end), in position order: the CPU's order, so the sums repeat run to run
// and match the CPU's (which also sums each row in position order).
// Padding and out-of-range positions sort last under the key V and count
// for nothing. Chosen over one block per vocabulary row scanning all M
// indices (V x M reads) and over per-position partial sums (a second pass):
// the sort is O(M) passes over 8-byte keys; a very frequent row is summed
// by one block, serially over its positions.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "llm_kernels.h"

namespace qk::cuda {

namespace {

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMax = 65535 * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMax ? blocks : kMax));
}

template <typename F>
void dispatch_index(int code, F&& f) {
  if (code == kI32) f(int32_t{});
  else if (code == kI64) f(int64_t{});
}

// `units` words of W per row; one thread per word.
template <typename W, typename I>
__global__ void embedding_rows(W* out, const W* weight, const I* idx, int64_t M, int64_t units, int64_t V,
                               unsigned long long* bad) {
  const int64_t total = M * units;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / units, k = e - i * units;
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= V) {
      if (k == 0) atomicMin(bad, static_cast<unsigned long long>(i + 1));
      continue;
    }
    out[e] = weight[v * units + k];
  }
}

// Rows of zero bytes: the indices are checked all the same.
template <typename I>
__global__ void embedding_check(const I* idx, int64_t M, int64_t V, unsigned long long* bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= V) atomicMin(bad, static_cast<unsigned long long>(i + 1));
  }
}

template <typename W, typename I>
void copy_rows(void* out, const void* weight, size_t row_bytes, const I* idx, int64_t M, int64_t V,
               unsigned long long* bad, cudaStream_t s) {
  const int64_t units = static_cast<int64_t>(row_bytes / sizeof(W));
  embedding_rows<W, I><<<grid_for(M * units, kBlock), kBlock, 0, s>>>(
      static_cast<W*>(out), static_cast<const W*>(weight), idx, M, units, V, bad);
}

// Sort keys: the row, or V for a position that counts for nothing.
template <typename I>
__global__ void embedding_keys(uint64_t* keys, int64_t* pos, const I* idx, int64_t M, int64_t V, int64_t padding) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    const bool on = v >= 0 && v < V && v != padding;
    keys[i] = static_cast<uint64_t>(on ? v : V);
    pos[i] = i;
  }
}

// Block b takes the runs starting at sorted positions b, b + gridDim.x, ...
// (the test is the same for every thread of the block).
template <typename T>
__global__ void embedding_runs(T* dw, const T* grad, const uint64_t* keys, const int64_t* pos, int64_t M, int64_t D,
                               uint64_t V) {
  using A = typename ComputeOf<T>::type;
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    const uint64_t key = keys[i];
    if (key == V || (i > 0 && keys[i - 1] == key)) continue;
    T* drow = dw + static_cast<int64_t>(key) * D;
    const T* first = grad + pos[i] * D;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
      // The CPU adds f32/f64 rows into the zeroed row (0 + g0 + g1 ...) and
      // sums f16/bf16 rows in f32 from the first (g0 + g1 ...).
      A acc = std::is_same_v<A, T> ? A(0) + convert<A>(first[k]) : convert<A>(first[k]);
      for (int64_t j = i + 1; j < M && keys[j] == key; ++j) acc += convert<A>(grad[pos[j] * D + k]);
      drow[k] = convert<T>(acc);
    }
  }
}

int key_bits(int64_t V) {  // bits that hold every key in [0, V]
  int bits = 1;
  while (bits < 64 && (uint64_t(1) << bits) <= static_cast<uint64_t>(V)) ++bits;
  return bits;
}

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t M, int64_t V) {
  size_t bytes = 0;
  QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                static_cast<uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                static_cast<int64_t*>(nullptr), M, 0, key_bits(V)));
  return bytes;
}

}  // namespace

void launch_embedding(void* out, const void* weight, size_t row_bytes, const void* idx, int idx_dtype, int64_t M,
                      int64_t V, unsigned long long* bad, cudaStream_t stream) {
  if (M <= 0) return;
  dispatch_index(idx_dtype, [&](auto it) {
    using I = decltype(it);
    const I* ip = static_cast<const I*>(idx);
    if (row_bytes == 0) {
      embedding_check<I><<<grid_for(M, kBlock), kBlock, 0, stream>>>(ip, M, V, bad);
      QK_CUDA_CHECK(cudaGetLastError());
      return;
    }
    // The widest word dividing the row that both base addresses are aligned to.
    const auto addr = reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(weight);
    auto fits = [&](size_t w) { return row_bytes % w == 0 && addr % w == 0; };
    if (fits(16)) copy_rows<uint4, I>(out, weight, row_bytes, ip, M, V, bad, stream);
    else if (fits(8)) copy_rows<uint2, I>(out, weight, row_bytes, ip, M, V, bad, stream);
    else if (fits(4)) copy_rows<uint32_t, I>(out, weight, row_bytes, ip, M, V, bad, stream);
    else if (fits(2)) copy_rows<uint16_t, I>(out, weight, row_bytes, ip, M, V, bad, stream);
    else copy_rows<uint8_t, I>(out, weight, row_bytes, ip, M, V, bad, stream);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

size_t embedding_backward_workspace(int64_t M, int64_t V) {
  if (M <= 0) return 0;
  return 4 * round_up(static_cast<size_t>(M) * 8) + round_up(sort_temp_bytes(M, V));
}

void launch_embedding_backward(void* dw, const void* grad, int dtype, const void* idx, int idx_dtype, int64_t M,
                               int64_t D, int64_t V, int64_t padding_idx, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  if (M <= 0 || D <= 0 || V <= 0) return;
  char* ws = static_cast<char*>(workspace);
  const size_t arr = round_up(static_cast<size_t>(M) * 8);
  auto* keys_in = reinterpret_cast<uint64_t*>(ws);
  auto* keys_out = reinterpret_cast<uint64_t*>(ws + arr);
  auto* pos_in = reinterpret_cast<int64_t*>(ws + 2 * arr);
  auto* pos_out = reinterpret_cast<int64_t*>(ws + 3 * arr);
  void* temp = ws + 4 * arr;
  size_t temp_bytes = workspace_bytes - 4 * arr;
  dispatch_index(idx_dtype, [&](auto it) {
    using I = decltype(it);
    embedding_keys<I><<<grid_for(M, kBlock), kBlock, 0, stream>>>(keys_in, pos_in, static_cast<const I*>(idx), M, V,
                                                                  padding_idx);
    QK_CUDA_CHECK(cudaGetLastError());
  });
  QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, M, 0,
                                                key_bits(V), stream));
  int threads = 32;
  while (threads < kBlock && threads < D) threads *= 2;
  const int64_t blocks = M < 65535 * 16 ? M : 65535 * 16;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    embedding_runs<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<T*>(dw), static_cast<const T*>(grad), keys_out, pos_out, M, D, static_cast<uint64_t>(V));
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda

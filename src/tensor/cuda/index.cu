// Joining and indexing on CUDA (the CPU's kernels: src/tensor/cpu/index.cc):
// cat, index_select and gather move bits (in the widest unit every row and
// pointer allows); index_add, scatter_add and one_hot add or set values.
//
// Sums repeat and match the CPU bit for bit: no floating atomics. Each
// output element is summed by one thread, in the CPU's order, from a's
// value: index_add and the sorted scatter_add sort the index positions by
// destination with CUB's radix sort, which is stable (positions of one
// destination stay in increasing order, the CPU's order), and the first
// thread of each run of equal destinations adds the run. scatter_add over
// many (or short) lines along dim walks each line in order instead (lines
// write disjoint outputs). f16/bf16 sums are f32, rounded once, as the CPU
// (cpu/index.cc, Note [Reduced-float sums]).
//
// An index out of range is neither read through nor written; *bad gets the
// lowest such position + 1 (an integer atomicMin), for the glue to raise.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "index_kernels.h"
#include "workspace.h"

namespace qk::cuda {

namespace {

constexpr int kThreads = kBlock;  // grid_for counts blocks of kBlock



template <typename F>
void dispatch_index(int code, F&& f) {
  if (code == kI32) f(int32_t{});
  else if (code == kI64) f(int64_t{});
}

// The numeric codes (not bool).
template <typename F>
void dispatch_numeric(int code, F&& f) {
  if (code != kBool) dispatch(code, [&](auto t) {
      using T = decltype(t);
      if constexpr (!std::is_same_v<T, bool>) f(T{});
    });
}

// Calls f(U{}) with U an unsigned type of `bytes` (1, 2, 4, 8 or 16) bytes.
template <typename F>
void dispatch_unit(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(static_cast<unsigned long long>(0)); break;
    case 16: f(uint4{}); break;
  }
}

// The widest unit (16 bytes down to 1) dividing every value given.
size_t unit_of(uint64_t all_or) {
  size_t u = 16;
  while (u > 1 && (all_or & (u - 1)) != 0) u /= 2;
  return u;
}
uint64_t addr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

template <typename I>
__device__ __forceinline__ bool in_range(I v, int64_t size) {
  return v >= 0 && static_cast<int64_t>(v) < size;
}

__device__ __forceinline__ void report(unsigned long long* bad, int64_t pos) {
  atomicMin(bad, static_cast<unsigned long long>(pos + 1));
}


// A stable sort of (u64 key, i64 value) pairs on keys' bits [0, end_bit).
void sort_pairs(void* temp, size_t& temp_bytes, const uint64_t* keys_in, uint64_t* keys_out, const int64_t* vals_in,
                int64_t* vals_out, int64_t count, int end_bit, cudaStream_t stream) {
  QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, count, 0,
                                                end_bit, stream));
}

struct SortBuffers {
  uint64_t *keys_in, *keys_out;
  int64_t *vals_in, *vals_out;
  void* temp;
  size_t temp_bytes;
};

SortBuffers carve_sort(void* workspace, int64_t count, int end_bit, size_t* total) {
  Carver c{static_cast<char*>(workspace)};
  SortBuffers b{};
  b.keys_in = c.take<uint64_t>(count);
  b.keys_out = c.take<uint64_t>(count);
  b.vals_in = c.take<int64_t>(count);
  b.vals_out = c.take<int64_t>(count);
  sort_pairs(nullptr, b.temp_bytes, nullptr, nullptr, nullptr, nullptr, count, end_bit, nullptr);
  b.temp = c.take<char>(static_cast<int64_t>(b.temp_bytes));
  *total = c.used;
  return b;
}

// ---- cat ------------------------------------------------------------------

constexpr int kCatBatch = 32;
struct CatBatch {
  const void* src[kCatBatch];
  int64_t units[kCatBatch];  // per outer row
  int64_t at[kCatBatch];     // in the output row
};

// blockIdx.y: the piece; x: its elements.
template <typename U>
__global__ void cat_kernel(U* out, CatBatch b, int64_t outer, int64_t row_units) {
  const int j = blockIdx.y;
  const int64_t piece = b.units[j], at = b.at[j];
  const U* src = static_cast<const U*>(b.src[j]);
  QK_GRID_STRIDE(e, outer * piece) {
    const int64_t r = e / piece;
    out[r * row_units + at + (e - r * piece)] = src[e];
  }
}

// ---- index checks, index_select, gather, one_hot -------------------------------

template <typename I>
__global__ void check_indices_kernel(const I* index, int64_t k, int64_t size, unsigned long long* bad) {
  QK_GRID_STRIDE(i, k) {
    if (!in_range(index[i], size)) report(bad, i);
  }
}

// out [outer, k, inner] <- a [outer, n, inner] at the index (inner in units).
template <typename U, typename I>
__global__ void index_select_kernel(U* out, const U* a, const I* index, int64_t outer, int64_t n, int64_t inner,
                                    int64_t k) {
  QK_GRID_STRIDE(t, outer * k * inner) {
    const int64_t c = t % inner, q = t / inner, i = q % k, r = q / k;
    const I v = index[i];
    if (!in_range(v, n)) continue;  // reported by check_indices_kernel
    out[t] = a[(r * n + static_cast<int64_t>(v)) * inner + c];
  }
}

// Position p of the index: its offset in a (dim's coordinate replaced by the
// index value) and in src; false when the value is out of range.
template <typename I>
__device__ __forceinline__ bool locate(const GatherLayout& l, const I* index, int64_t p, int64_t& a_off,
                                       int64_t& s_off) {
  int64_t rem = p;
  a_off = 0;
  s_off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t c = rem % l.sizes[d];
    rem /= l.sizes[d];
    s_off += c * l.s_strides[d];
    if (d != l.dim) a_off += c * l.a_strides[d];
  }
  const I v = index[p];
  if (!in_range(v, l.dim_size)) return false;
  a_off += static_cast<int64_t>(v) * l.a_strides[l.dim];
  return true;
}

template <typename U, typename I>
__global__ void gather_kernel(U* out, const U* a, const I* index, GatherLayout l, unsigned long long* bad) {
  QK_GRID_STRIDE(p, l.numel) {
    int64_t a_off, s_off;
    if (locate(l, index, p, a_off, s_off)) out[p] = a[a_off];
    else report(bad, p);
  }
}

template <typename I>
__global__ void one_hot_kernel(int64_t* out, const I* index, int64_t m, int64_t classes, unsigned long long* bad) {
  QK_GRID_STRIDE(i, m) {
    const I v = index[i];
    if (in_range(v, classes)) out[i * classes + static_cast<int64_t>(v)] = 1;
    else report(bad, i);
  }
}

// ---- index_add, scatter_add ----------------------------------------------------

// keys[i] <- index[i] (n where out of range: after every target), vals[i] <- i.
template <typename I>
__global__ void index_keys_kernel(uint64_t* keys, int64_t* vals, const I* index, int64_t k, int64_t n,
                                  unsigned long long* bad) {
  QK_GRID_STRIDE(i, k) {
    const I v = index[i];
    const bool ok = in_range(v, n);
    if (!ok) report(bad, i);
    keys[i] = ok ? static_cast<uint64_t>(v) : static_cast<uint64_t>(n);
    vals[i] = i;
  }
}

// Thread (r, q, c): when sorted position q starts a run of target j, out[r,
// j, c] += the run's source rows, in source order (the sort is stable).
template <typename T>
__global__ void index_add_runs(T* out, const T* src, const uint64_t* keys, const int64_t* order, int64_t outer,
                               int64_t n, int64_t inner, int64_t k) {
  using A = typename ComputeOf<T>::type;
  QK_GRID_STRIDE(t, outer * k * inner) {
    const int64_t c = t % inner, q = (t / inner) % k, r = t / (inner * k);
    const uint64_t j = keys[q];
    if (j >= static_cast<uint64_t>(n) || (q > 0 && keys[q - 1] == j)) continue;
    T* dst = out + (r * n + static_cast<int64_t>(j)) * inner + c;
    A acc = convert<A>(*dst);
    for (int64_t p = q; p < k && keys[p] == j; ++p) acc += convert<A>(src[(r * k + order[p]) * inner + c]);
    *dst = convert<T>(acc);
  }
}

// One thread per line of the index along dim, in order. out has a's
// strides, of the compute type A.
template <typename A, typename T, typename I>
__global__ void scatter_lines_kernel(A* out, const T* src, const I* index, GatherLayout l, unsigned long long* bad) {
  const int64_t n = l.sizes[l.dim];
  int64_t p_step = 1;  // the index's stride along dim
  for (int d = l.dim + 1; d < l.ndim; ++d) p_step *= l.sizes[d];
  QK_GRID_STRIDE(line, l.numel / n) {
    int64_t rem = line, p = 0, a_off = 0, s_off = 0, stride = 1;
    for (int d = l.ndim - 1; d >= 0; --d) {
      if (d != l.dim) {
        const int64_t c = rem % l.sizes[d];
        rem /= l.sizes[d];
        p += c * stride;
        a_off += c * l.a_strides[d];
        s_off += c * l.s_strides[d];
      }
      stride *= l.sizes[d];
    }
    for (int64_t i = 0; i < n; ++i, p += p_step, s_off += l.s_strides[l.dim]) {
      const I v = index[p];
      if (!in_range(v, l.dim_size)) {
        report(bad, p);
        continue;
      }
      A* dst = out + a_off + static_cast<int64_t>(v) * l.a_strides[l.dim];
      *dst = static_cast<A>(*dst + convert<A>(src[s_off]));
    }
  }
}

// keys[p] <- p's destination in out (out_numel where out of range), vals[p] <- its offset in src.
template <typename I>
__global__ void scatter_keys_kernel(uint64_t* keys, int64_t* vals, const I* index, GatherLayout l, int64_t out_numel,
                                    unsigned long long* bad) {
  QK_GRID_STRIDE(p, l.numel) {
    int64_t a_off, s_off;
    const bool ok = locate(l, index, p, a_off, s_off);
    if (!ok) report(bad, p);
    keys[p] = static_cast<uint64_t>(ok ? a_off : out_numel);
    vals[p] = s_off;
  }
}

// Sorted position q starting a run of destination d: out[d] += the run, in order.
template <typename T>
__global__ void scatter_runs_kernel(T* out, const T* src, const uint64_t* keys, const int64_t* vals, int64_t m,
                                    int64_t out_numel) {
  using A = typename ComputeOf<T>::type;
  QK_GRID_STRIDE(q, m) {
    const uint64_t d = keys[q];
    if (d >= static_cast<uint64_t>(out_numel) || (q > 0 && keys[q - 1] == d)) continue;
    A acc = convert<A>(out[d]);
    for (int64_t p = q; p < m && keys[p] == d; ++p) acc = static_cast<A>(acc + convert<A>(src[vals[p]]));
    out[d] = convert<T>(acc);
  }
}

}  // namespace

void launch_cat(void* out, const CatPiece* pieces, int64_t count, int64_t outer, int64_t row_bytes,
                cudaStream_t stream) {
  if (outer <= 0 || row_bytes <= 0) return;
  uint64_t all = addr(out) | static_cast<uint64_t>(row_bytes);
  for (int64_t j = 0; j < count; ++j)
    if (pieces[j].bytes > 0)
      all |= addr(pieces[j].src) | static_cast<uint64_t>(pieces[j].bytes) | static_cast<uint64_t>(pieces[j].at);
  const size_t unit = unit_of(all);
  dispatch_unit(unit, [&](auto u) {
    using U = decltype(u);
    const int64_t us = static_cast<int64_t>(unit);
    for (int64_t j = 0; j < count;) {
      CatBatch b{};
      int m = 0;
      int64_t most = 0;
      for (; j < count && m < kCatBatch; ++j) {
        if (pieces[j].bytes <= 0) continue;
        b.src[m] = pieces[j].src;
        b.units[m] = pieces[j].bytes / us;
        b.at[m] = pieces[j].at / us;
        most = b.units[m] > most ? b.units[m] : most;
        ++m;
      }
      if (m == 0) break;
      const dim3 grid(grid_for(outer * most), static_cast<unsigned>(m));
      cat_kernel<U><<<grid, kThreads, 0, stream>>>(static_cast<U*>(out), b, outer, row_bytes / us);
      QK_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void launch_check_indices(const void* index, int index_dtype, int64_t k, int64_t size, unsigned long long* bad,
                          cudaStream_t stream) {
  if (k <= 0) return;
  dispatch_index(index_dtype, [&](auto it) {
    using I = decltype(it);
    check_indices_kernel<I><<<grid_for(k), kThreads, 0, stream>>>(static_cast<const I*>(index), k, size, bad);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_index_select(void* out, const void* a, size_t itemsize, const void* index, int index_dtype,
                         int64_t outer, int64_t n, int64_t inner, int64_t k, cudaStream_t stream) {
  if (outer * k * inner <= 0) return;
  const uint64_t row = static_cast<uint64_t>(inner) * itemsize;
  const size_t unit = unit_of(addr(out) | addr(a) | row);
  const int64_t units = static_cast<int64_t>(row / unit);
  dispatch_unit(unit, [&](auto u) {
    using U = decltype(u);
    dispatch_index(index_dtype, [&](auto it) {
      using I = decltype(it);
      index_select_kernel<U, I><<<grid_for(outer * k * units), kThreads, 0, stream>>>(
          static_cast<U*>(out), static_cast<const U*>(a), static_cast<const I*>(index), outer, n, units, k);
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

size_t index_add_workspace(int64_t k, int64_t n) {
  size_t total = 0;
  carve_sort(nullptr, k, bits_for(static_cast<uint64_t>(n)), &total);
  return total;
}

void launch_index_add(void* out, const void* src, int dtype, const void* index, int index_dtype, int64_t outer,
                      int64_t n, int64_t inner, int64_t k, void* workspace, size_t workspace_bytes,
                      unsigned long long* bad, cudaStream_t stream) {
  if (k <= 0) return;
  const int end_bit = bits_for(static_cast<uint64_t>(n));
  size_t total = 0;
  SortBuffers b = carve_sort(workspace, k, end_bit, &total);
  if (total > workspace_bytes) {
    QK_CUDA_CHECK(cudaErrorInvalidValue);  // the glue sized it with index_add_workspace
  }
  dispatch_index(index_dtype, [&](auto it) {
    using I = decltype(it);
    index_keys_kernel<I><<<grid_for(k), kThreads, 0, stream>>>(b.keys_in, b.vals_in, static_cast<const I*>(index),
                                                               k, n, bad);
    QK_CUDA_CHECK(cudaGetLastError());
  });
  if (outer * inner <= 0 || n <= 0) return;  // nothing to add; the indices are checked
  sort_pairs(b.temp, b.temp_bytes, b.keys_in, b.keys_out, b.vals_in, b.vals_out, k, end_bit, stream);
  dispatch_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    index_add_runs<T><<<grid_for(outer * k * inner), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(src), b.keys_out, b.vals_out, outer, n, inner, k);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_gather(void* out, const void* a, size_t itemsize, const void* index, int index_dtype,
                   const GatherLayout& l, unsigned long long* bad, cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch_unit(itemsize, [&](auto u) {
    using U = decltype(u);
    dispatch_index(index_dtype, [&](auto it) {
      using I = decltype(it);
      gather_kernel<U, I><<<grid_for(l.numel), kThreads, 0, stream>>>(static_cast<U*>(out), static_cast<const U*>(a),
                                                                      static_cast<const I*>(index), l, bad);
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void launch_scatter_add_lines(void* out, int out_dtype, const void* src, int src_dtype, const void* index,
                              int index_dtype, const GatherLayout& l, unsigned long long* bad, cudaStream_t stream) {
  const int64_t n = l.sizes[l.dim];
  if (l.numel <= 0 || n <= 0) return;
  dispatch_numeric(src_dtype, [&](auto t) {
    using T = decltype(t);
    using A = typename ComputeOf<T>::type;
    // out is of the compute type: f32 for f16/bf16, src's dtype otherwise.
    const int want = std::is_same_v<A, T> ? src_dtype : int(kF32);
    if (out_dtype != want) QK_CUDA_CHECK(cudaErrorInvalidValue);
    dispatch_index(index_dtype, [&](auto it) {
      using I = decltype(it);
      scatter_lines_kernel<A, T, I><<<grid_for(l.numel / n), kThreads, 0, stream>>>(
          static_cast<A*>(out), static_cast<const T*>(src), static_cast<const I*>(index), l, bad);
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

size_t scatter_add_sort_workspace(int64_t numel, int64_t out_numel) {
  size_t total = 0;
  carve_sort(nullptr, numel, bits_for(static_cast<uint64_t>(out_numel)), &total);
  return total;
}

void launch_scatter_add_sorted(void* out, const void* src, int dtype, const void* index, int index_dtype,
                               const GatherLayout& l, int64_t out_numel, void* workspace, size_t workspace_bytes,
                               unsigned long long* bad, cudaStream_t stream) {
  if (l.numel <= 0) return;
  const int end_bit = bits_for(static_cast<uint64_t>(out_numel));
  size_t total = 0;
  SortBuffers b = carve_sort(workspace, l.numel, end_bit, &total);
  if (total > workspace_bytes) {
    QK_CUDA_CHECK(cudaErrorInvalidValue);  // the glue sized it with scatter_add_sort_workspace
  }
  dispatch_index(index_dtype, [&](auto it) {
    using I = decltype(it);
    scatter_keys_kernel<I><<<grid_for(l.numel), kThreads, 0, stream>>>(b.keys_in, b.vals_in,
                                                                       static_cast<const I*>(index), l, out_numel, bad);
    QK_CUDA_CHECK(cudaGetLastError());
  });
  sort_pairs(b.temp, b.temp_bytes, b.keys_in, b.keys_out, b.vals_in, b.vals_out, l.numel, end_bit, stream);
  dispatch_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    scatter_runs_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(src), b.keys_out, b.vals_out, l.numel, out_numel);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_one_hot(int64_t* out, const void* index, int index_dtype, int64_t m, int64_t num_classes,
                    unsigned long long* bad, cudaStream_t stream) {
  if (m * num_classes > 0)
    QK_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(m * num_classes) * sizeof(int64_t), stream));
  if (m <= 0) return;
  dispatch_index(index_dtype, [&](auto it) {
    using I = decltype(it);
    one_hot_kernel<I><<<grid_for(m), kThreads, 0, stream>>>(out, static_cast<const I*>(index), m, num_classes, bad);
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda

// topk on CUDA: the CPU's order (cpu/topk.cc: NaN above every number, then
// the largest or smallest value, compared in the compute type so -0 ties
// +0, ties to the lower index; always sorted) by a stable sort of each row.
// Every element becomes an unsigned key whose ascending order is that order
// (NaN 0; numbers mapped monotonically, reversed for largest), paired with
// its position; CUB's sorts keep equal keys in position order. Then the
// first k of each row are the result.
//
// One row: a device-wide radix sort. Many short rows (or very many rows):
// CUB's segmented stable sort, a row per warp or block. A few long rows: two
// device-wide radix sorts (by key, then stably by row), so long rows do not
// sit on one block each. Thresholds not measured.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "index_kernels.h"
#include "workspace.h"

namespace qk::cuda {

namespace {

constexpr int kThreads = kBlock;  // grid_for counts blocks of kBlock



template <typename F>
void dispatch_numeric(int code, F&& f) {
  if (code != kBool) dispatch(code, [&](auto t) {
      using T = decltype(t);
      if constexpr (!std::is_same_v<T, bool>) f(T{});
    });
}

// The key type of a dtype: as wide as its compute type.
template <typename T>
using KeyOf = std::conditional_t<sizeof(typename ComputeOf<T>::type) == 8, uint64_t, uint32_t>;

// The bits of the keys that differ: f16 and bf16 values widened to f32 keep
// their low 13 and 16 bits constant once mapped (so do the mapped keys'
// ranks); u8 keys use 8 bits.
template <typename T>
void key_bits(int& begin, int& end) {
  begin = std::is_same_v<T, __half> ? 13 : std::is_same_v<T, __nv_bfloat16> ? 16 : 0;
  end = std::is_same_v<T, uint8_t> ? 8 : static_cast<int>(sizeof(KeyOf<T>) * 8);
}

// The key of x: ascending keys are the CPU's "better" order.
template <typename T, typename K>
__device__ __forceinline__ K order_key(T x, bool largest) {
  using C = typename ComputeOf<T>::type;
  const C v = convert<C>(x);
  K u;
  if constexpr (std::is_floating_point_v<C>) {
    static_assert(sizeof(C) == sizeof(K));
    if (v != v) return K(0);  // NaN first, whichever way; the numbers' keys are all > 0
    const C z = v == C(0) ? C(0) : v;  // -0 ties +0 (the CPU compares with ==)
    K bits;
    memcpy(&bits, &z, sizeof bits);
    constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
    u = (bits & sign) ? ~bits : (bits | sign);  // ascending with the value
  } else if constexpr (std::is_signed_v<C>) {
    u = static_cast<K>(v) ^ (K(1) << (sizeof(C) * 8 - 1));
  } else {
    u = static_cast<K>(v);
  }
  constexpr K mask = std::is_same_v<C, uint8_t> ? K(0xff) : ~K(0);
  return largest ? (u ^ mask) : u;
}

template <typename T, typename K>
__global__ void keys_kernel(K* keys, int64_t* pos, const T* a, int64_t total, bool largest) {
  QK_GRID_STRIDE(p, total) {
    keys[p] = order_key<T, K>(a[p], largest);
    pos[p] = p;
  }
}

__global__ void offsets_kernel(int64_t* offsets, int64_t rows, int64_t n) {
  QK_GRID_STRIDE(r, rows + 1) offsets[r] = r * n;
}

__global__ void row_keys_kernel(uint64_t* row_keys, const int64_t* pos, int64_t total, int64_t n) {
  QK_GRID_STRIDE(q, total) row_keys[q] = static_cast<uint64_t>(pos[q] / n);
}

// The first k of each sorted row (positions are flat: p - r*n is the index).
template <typename T>
__global__ void take_kernel(T* values, int64_t* indices, const T* a, const int64_t* sorted, int64_t rows, int64_t n,
                            int64_t k) {
  QK_GRID_STRIDE(t, rows * k) {
    const int64_t r = t / k, j = t - r * k;
    const int64_t p = sorted[r * n + j];
    values[t] = a[p];
    indices[t] = p - r * n;
  }
}

enum class Path { kOneRow, kSegmented, kTwoPass };

Path path_for(int64_t rows, int64_t n) {
  if (rows == 1) return Path::kOneRow;
  if (n <= 4096 || rows >= 512) return Path::kSegmented;
  return Path::kTwoPass;
}


template <typename K>
struct Buffers {
  K *keys_in, *keys_out;
  int64_t *pos_in, *pos_out, *offsets;
  uint64_t *row_in, *row_out;
  void* temp;
  size_t temp_bytes = 0;
};

// The workspace's pieces for the path (sizes only when workspace is null);
// *total: the bytes it takes.
template <typename K>
Buffers<K> carve(void* workspace, int64_t rows, int64_t n, int begin, int end, size_t* total) {
  const int64_t count = rows * n;
  const Path path = path_for(rows, n);
  Carver c{static_cast<char*>(workspace)};
  Buffers<K> b{};
  b.keys_in = c.take<K>(count);
  b.keys_out = c.take<K>(count);
  b.pos_in = c.take<int64_t>(count);
  b.pos_out = c.take<int64_t>(count);
  size_t temp = 0;
  if (path == Path::kSegmented) {
    b.offsets = c.take<int64_t>(rows + 1);
    QK_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp, static_cast<const K*>(nullptr),
                                                             static_cast<K*>(nullptr),
                                                             static_cast<const int64_t*>(nullptr),
                                                             static_cast<int64_t*>(nullptr), count, rows,
                                                             static_cast<const int64_t*>(nullptr),
                                                             static_cast<const int64_t*>(nullptr)));
  } else {
    QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const K*>(nullptr),
                                                  static_cast<K*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                  static_cast<int64_t*>(nullptr), count, begin, end));
    if (path == Path::kTwoPass) {
      b.row_in = c.take<uint64_t>(count);
      b.row_out = c.take<uint64_t>(count);
      size_t rows_temp = 0;
      QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
          nullptr, rows_temp, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
          static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), count, 0,
          bits_for(static_cast<uint64_t>(rows - 1))));
      temp = temp > rows_temp ? temp : rows_temp;
    }
  }
  b.temp_bytes = temp;
  b.temp = c.take<char>(static_cast<int64_t>(temp));
  *total = c.used;
  return b;
}

template <typename T>
void topk_as(void* values, int64_t* indices, const void* a, int64_t rows, int64_t n, int64_t k, bool largest,
             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using K = KeyOf<T>;
  int begin = 0, end = 0;
  key_bits<T>(begin, end);
  size_t total = 0;
  Buffers<K> b = carve<K>(workspace, rows, n, begin, end, &total);
  if (total > workspace_bytes) QK_CUDA_CHECK(cudaErrorInvalidValue);  // sized by topk_workspace
  const int64_t count = rows * n;
  const T* x = static_cast<const T*>(a);
  keys_kernel<T, K><<<grid_for(count), kThreads, 0, stream>>>(b.keys_in, b.pos_in, x, count, largest);
  QK_CUDA_CHECK(cudaGetLastError());
  const int64_t* sorted = b.pos_out;
  switch (path_for(rows, n)) {
    case Path::kOneRow:
      QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.temp, b.temp_bytes, b.keys_in, b.keys_out, b.pos_in, b.pos_out,
                                                    count, begin, end, stream));
      break;
    case Path::kSegmented: {
      offsets_kernel<<<grid_for(rows + 1), kThreads, 0, stream>>>(b.offsets, rows, n);
      QK_CUDA_CHECK(cudaGetLastError());
      const int64_t* begins = b.offsets;  // the iterator type the workspace was sized with
      QK_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(b.temp, b.temp_bytes, b.keys_in, b.keys_out, b.pos_in,
                                                               b.pos_out, count, rows, begins, begins + 1, stream));
      break;
    }
    case Path::kTwoPass:
      // By key over every row, then stably by row: each row's positions in key order.
      QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.temp, b.temp_bytes, b.keys_in, b.keys_out, b.pos_in, b.pos_out,
                                                    count, begin, end, stream));
      row_keys_kernel<<<grid_for(count), kThreads, 0, stream>>>(b.row_in, b.pos_out, count, n);
      QK_CUDA_CHECK(cudaGetLastError());
      QK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.temp, b.temp_bytes, b.row_in, b.row_out, b.pos_out, b.pos_in,
                                                    count, 0, bits_for(static_cast<uint64_t>(rows - 1)), stream));
      sorted = b.pos_in;
      break;
  }
  take_kernel<T><<<grid_for(rows * k), kThreads, 0, stream>>>(static_cast<T*>(values), indices, x, sorted, rows, n,
                                                               k);
  QK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t topk_workspace(int dtype, int64_t rows, int64_t n) {
  size_t total = 0;
  if (rows <= 0 || n <= 0) return 0;
  dispatch_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    int begin = 0, end = 0;
    key_bits<T>(begin, end);
    carve<KeyOf<T>>(nullptr, rows, n, begin, end, &total);
  });
  return total;
}

void launch_topk(void* values, int64_t* indices, const void* a, int dtype, int64_t rows, int64_t n, int64_t k,
                 bool largest, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (rows <= 0 || n <= 0 || k <= 0) return;
  dispatch_numeric(dtype, [&](auto t) {
    topk_as<decltype(t)>(values, indices, a, rows, n, k, largest, workspace, workspace_bytes, stream);
  });
}

}  // namespace qk::cuda

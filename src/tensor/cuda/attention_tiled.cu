// Flash attention on the tensor cores (FlashAttention-2's tiling, through
// WMMA): f16/bf16 q, k, v with one head dim D of 32, 64 or 128, the simple
// kernels' contract (attention.cu: bottom-right causal mask, grouped-query
// heads, the CPU's Philox dropout, lse over the visible keys, -inf and zeros
// for a query that sees none).
//
// Forward: a block of 4 warps takes 64 queries of one (b, h); each warp 16 of
// them. Per tile of 64 keys, K and V go to shared memory once for the block,
// S = Q K^T comes from the tensor cores in f32, the warp's lanes (two per
// row) do the online softmax over it and write P in the input's dtype (as
// FlashAttention rounds P for its second product), and O += P V on the
// tensor cores again; O is kept in f32 in shared memory because a WMMA
// accumulator's element-to-row layout is unspecified and every row has its
// own rescale factor.
//
// Backward, without atomics so that sums are repeatable, as the simple
// kernels: one kernel per 64 queries for dq (S and dP recomputed per key
// tile, dq += dS K) and one per 64 keys for dk and dv (S^T and dP^T
// recomputed per query tile of each query head of the group, dv += (P Z)^T
// dO, dk += dS^T Q); accumulators that need no rescale stay in registers.
// That is two more products than FlashAttention-2's atomic dq, for sums
// that do not depend on the order blocks run in.
#include <mma.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attention_common.cuh"
#include "attention_kernels.h"
#include "cuda_check.h"
#include "dtypes.cuh"

namespace qk::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarpSize = 32;
constexpr int kTile = 64;   // queries or keys per block tile
constexpr int kWarps = 4;   // 16 rows each
constexpr int kRows = 16;   // a warp's rows: one WMMA tile high
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kLdS = kTile + 4;  // f32 score rows (WMMA: a multiple of 4 floats)
constexpr int kLdP = kTile + 8;  // 16-bit probability rows (a multiple of 8 halves)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <int D> constexpr int ld_tile() { return D + 8; }  // 16-bit q/k/v/dout rows, padded off bank conflicts
template <int D> constexpr int ld_out() { return D + 4; }   // f32 output rows

template <typename T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [row0, row0 + 64) of a [rows, D] matrix whose row i starts at
// base + i * stride (16-byte aligned) into shared memory, zeros past `rows`.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* dst, const T* base, int64_t stride, int64_t row0, int64_t rows) {
  constexpr int kVec = 8;  // 16 bytes of 16-bit values
  constexpr int kPerRow = D / kVec;
  for (int i = threadIdx.x; i < kTile * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = i % kPerRow * kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(base + (row0 + r) * stride + c);
    *reinterpret_cast<uint4*>(dst + r * ld_tile<D>() + c) = v;
  }
}

// A warp's 16 x 64 block of X Y^T into `out` (f32, row length kLdS): X's
// 16 rows from `x` (row-major, ld_tile), Y's 64 rows from `y` (the
// block's tile, read as the column-major Y^T).
template <typename T, int D>
__device__ __forceinline__ void rows_times_tile_t(float* out, const T* x, const T* y) {
  constexpr int ld = ld_tile<D>();
  FragA<T> xf[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(xf[kk], x + kk * 16, ld);
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragBCol<T> yf;
      wmma::load_matrix_sync(yf, y + j * 16 * ld + kk * 16, ld);
      wmma::mma_sync(acc, xf[kk], yf, acc);
    }
    wmma::store_matrix_sync(out + j * 16, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[j] += W Y for a warp's 16 x 64 W (16-bit, row length kLdP) and the
// block's 64 x D tile Y (row-major, ld_tile): D / 16 accumulators.
template <typename T, int D>
__device__ __forceinline__ void accumulate_w_times_tile(FragAcc (&acc)[D / 16], const T* w, const T* y) {
  constexpr int ld = ld_tile<D>();
  FragA<T> wf[kTile / 16];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) wmma::load_matrix_sync(wf[kk], w + kk * 16, kLdP);
#pragma unroll
  for (int j = 0; j < D / 16; ++j)
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragBRow<T> yf;
      wmma::load_matrix_sync(yf, y + kk * 16 * ld + j * 16, ld);
      wmma::mma_sync(acc[j], wf[kk], yf, acc[j]);
    }
}

// Writes a warp's 16 x D accumulators, times `factor`, to rows of `out`
// (row r at out + row_offset(r), rows with row_ok(r) false skipped) through
// `stage` (16 x ld_out floats of the warp's shared memory).
template <typename T, int D, typename RowOffset, typename RowOk>
__device__ __forceinline__ void write_rows(FragAcc (&acc)[D / 16], float factor, float* stage, T* out,
                                           RowOffset row_offset, RowOk row_ok) {
  constexpr int ld = ld_out<D>();
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
#pragma unroll
    for (int e = 0; e < acc[j].num_elements; ++e) acc[j].x[e] *= factor;
    wmma::store_matrix_sync(stage + j * 16, acc[j], ld, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % kWarpSize;
  for (int i = lane; i < kRows * D; i += kWarpSize) {
    const int r = i / D, d = i % D;
    if (row_ok(r)) out[row_offset(r) + d] = convert<T>(stage[r * ld + d]);
  }
  __syncwarp();
}

// Shared memory, in bytes, of each kernel for head dim D and 16-bit values.
template <int D> constexpr size_t tile_bytes() { return size_t(kTile) * ld_tile<D>() * 2; }
template <int D> constexpr size_t fwd_bytes() {
  return 3 * tile_bytes<D>() + kWarps * (size_t(kRows) * kLdS * 4 + size_t(kRows) * kLdP * 2 +
                                         size_t(kRows) * ld_out<D>() * 4);
}
// A warp's scratch in the backward: S and dP (f32), two 16-bit blocks.
constexpr size_t bwd_warp_bytes() { return 2 * size_t(kRows) * kLdS * 4 + 2 * size_t(kRows) * kLdP * 2; }
template <int D> constexpr size_t bwd_bytes() { return 4 * tile_bytes<D>() + kWarps * bwd_warp_bytes() + 2 * kTile * 4; }
// The staging of write_rows fits in a warp's S and dP.
static_assert(size_t(kRows) * ld_out<128>() * 4 <= 2 * size_t(kRows) * kLdS * 4);

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) tiled_fwd(AttentionShape a, const T* q, const T* k, const T* v, T* out,
                                                      float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>(), ldo = ld_out<D>();
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kTile * ld;
  T* vs = ks + kTile * ld;
  // Then each warp's scores (f32), probabilities (16-bit) and output (f32).
  unsigned char* rest = smem + 3 * tile_bytes<D>();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* sw = reinterpret_cast<float*>(rest) + warp * kRows * kLdS;
  rest += kWarps * kRows * kLdS * sizeof(float);
  T* pw = reinterpret_cast<T*>(rest) + warp * kRows * kLdP;
  rest += kWarps * kRows * kLdP * sizeof(T);
  float* ow = reinterpret_cast<float*>(rest) + warp * kRows * ldo;

  const int64_t b = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq, hk = kv_head(a, h);
  const int64_t t0 = int64_t(blockIdx.y) * kTile;
  load_tile<T, D>(qs, q + b * a.q_sb + h / a.q_group * a.q_sh + h % a.q_group * a.q_sg, a.q_st, t0, a.T);
  for (int i = lane; i < kRows * ldo; i += kWarpSize) ow[i] = 0;
  // Lanes 2r and 2r + 1 own row r of the warp's 16: columns [half * 32, half * 32 + 32).
  const int r = lane / 2, half = lane % 2;
  const int64_t t = t0 + warp * kRows + r;
  const int64_t row_end = t < a.T ? kv_end(a, t) : 0;
  const int64_t block_end = kv_end(a, (t0 + kTile < a.T ? t0 + kTile : a.T) - 1);
  float m = kNegInf, l = 0;
  const T* kb = k + b * a.k_sb + hk * a.k_sh;
  const T* vb = v + b * a.v_sb + hk * a.v_sh;
  for (int64_t s0 = 0; s0 < block_end; s0 += kTile) {
    __syncthreads();  // the last tile's K and V are read (and, the first time, q is loaded)
    load_tile<T, D>(ks, kb, a.k_ss, s0, a.S);
    load_tile<T, D>(vs, vb, a.v_ss, s0, a.S);
    __syncthreads();
    rows_times_tile_t<T, D>(sw, qs + warp * kRows * ld, ks);
    __syncwarp();
    float* srow = sw + r * kLdS;
    float mx = kNegInf;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float x = s0 + c < row_end ? srow[c] * a.scale : kNegInf;
      srow[c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float alpha = m_new == kNegInf ? 1.0f : __expf(m - m_new);  // 0 while m is -inf
    float sum = 0;
    T* prow = pw + r * kLdP;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float x = srow[c];
      const float p = x == kNegInf ? 0.0f : __expf(x - m_new);
      sum += p;
      prow[c] = convert<T>(p == 0.0f ? 0.0f : p * dropout_factor(a, b, h, t, s0 + c));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = ow + r * ldo;
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) orow[d] *= alpha;
    __syncwarp();
    FragAcc acc[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; ++j) wmma::load_matrix_sync(acc[j], ow + j * 16, ldo, wmma::mem_row_major);
    accumulate_w_times_tile<T, D>(acc, pw, vs);
#pragma unroll
    for (int j = 0; j < D / 16; ++j) wmma::store_matrix_sync(ow + j * 16, acc[j], ldo, wmma::mem_row_major);
    __syncwarp();
  }
  // Each row's 1 / l (0 for a query that sees no key: zeros) through the
  // warp's score rows, so that the warp writes whole rows together.
  __syncwarp();
  if (half == 0) sw[r] = l > 0 ? 1.0f / l : 0.0f;
  if (half == 0 && t < a.T) lse[(b * a.Hq + h) * a.T + t] = l > 0 ? m + logf(l) : kNegInf;
  __syncwarp();
  for (int i = lane; i < kRows * D; i += kWarpSize) {
    const int row = i / D, d = i % D;
    const int64_t tr = t0 + warp * kRows + row;
    if (tr < a.T) out[((b * a.T + tr) * a.Hq + h) * a.Dv + d] = convert<T>(ow[row * ldo + d] * sw[row]);
  }
}

// dq for 64 queries of one (b, h): dq = scale * sum over key tiles of dS K,
// dS = P (dP Z - delta), P = exp(scale S - lse), dP = dO V^T.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) tiled_dq(AttentionShape a, const T* dout, const T* q, const T* k,
                                                     const T* v, const float* lse, const float* delta, T* dq) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>();
  T* qs = reinterpret_cast<T*>(smem);
  T* gs = qs + kTile * ld;
  T* ks = gs + kTile * ld;
  T* vs = ks + kTile * ld;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  unsigned char* scratch = reinterpret_cast<unsigned char*>(vs + kTile * ld) + warp * bwd_warp_bytes();
  float* sw = reinterpret_cast<float*>(scratch);
  float* dpw = sw + kRows * kLdS;
  T* dsw = reinterpret_cast<T*>(dpw + kRows * kLdS);

  const int64_t b = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq, hk = kv_head(a, h);
  const int64_t t0 = int64_t(blockIdx.y) * kTile;
  load_tile<T, D>(qs, q + b * a.q_sb + h / a.q_group * a.q_sh + h % a.q_group * a.q_sg, a.q_st, t0, a.T);
  load_tile<T, D>(gs, dout + b * a.g_sb + h * a.g_sh, a.g_st, t0, a.T);
  const int r = lane / 2, half = lane % 2;
  const int64_t t = t0 + warp * kRows + r;
  const int64_t row = (b * a.Hq + h) * a.T + t;
  const float lrow = t < a.T ? lse[row] : kNegInf, dl = t < a.T ? delta[row] : 0.0f;
  const int64_t row_end = lrow == kNegInf ? 0 : kv_end(a, t);
  const int64_t block_end = kv_end(a, (t0 + kTile < a.T ? t0 + kTile : a.T) - 1);
  FragAcc acc[D / 16];
#pragma unroll
  for (int j = 0; j < D / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
  const T* kb = k + b * a.k_sb + hk * a.k_sh;
  const T* vb = v + b * a.v_sb + hk * a.v_sh;
  for (int64_t s0 = 0; s0 < block_end; s0 += kTile) {
    __syncthreads();
    load_tile<T, D>(ks, kb, a.k_ss, s0, a.S);
    load_tile<T, D>(vs, vb, a.v_ss, s0, a.S);
    __syncthreads();
    rows_times_tile_t<T, D>(sw, qs + warp * kRows * ld, ks);
    rows_times_tile_t<T, D>(dpw, gs + warp * kRows * ld, vs);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int64_t s = s0 + c;
      float ds = 0;
      if (s < row_end) {
        const float p = __expf(sw[r * kLdS + c] * a.scale - lrow);
        ds = p * (dpw[r * kLdS + c] * dropout_factor(a, b, h, t, s) - dl);
      }
      dsw[r * kLdP + c] = convert<T>(ds);
    }
    __syncwarp();
    accumulate_w_times_tile<T, D>(acc, dsw, ks);
  }
  write_rows<T, D>(
      acc, a.scale, sw, dq, [&](int i) { return row_major_q(a, b, t0 + warp * kRows + i, h); },
      [&](int i) { return t0 + warp * kRows + i < a.T; });
}

// dk and dv for 64 keys of one (b, hk): over the query heads of the group
// and the query tiles that see any of the keys, dv += (P Z)^T dO and
// dk += dS^T Q, dk scaled at the end.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) tiled_dkv(AttentionShape a, const T* dout, const T* q, const T* k,
                                                      const T* v, const float* lse, const float* delta, T* dk,
                                                      T* dv) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>();
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kTile * ld;
  T* qs = vs + kTile * ld;
  T* gs = qs + kTile * ld;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  unsigned char* scratch = reinterpret_cast<unsigned char*>(gs + kTile * ld) + warp * bwd_warp_bytes();
  float* sw = reinterpret_cast<float*>(scratch);
  float* dpw = sw + kRows * kLdS;
  T* pzw = reinterpret_cast<T*>(dpw + kRows * kLdS);
  T* dsw = pzw + kRows * kLdP;
  float* lse_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(gs + kTile * ld) + kWarps * bwd_warp_bytes());
  float* delta_s = lse_s + kTile;

  const int64_t b = blockIdx.x / a.Hkv, hk = blockIdx.x % a.Hkv;
  const int64_t s0 = int64_t(blockIdx.y) * kTile;
  load_tile<T, D>(ks, k + b * a.k_sb + hk * a.k_sh, a.k_ss, s0, a.S);
  load_tile<T, D>(vs, v + b * a.v_sb + hk * a.v_sh, a.v_ss, s0, a.S);
  // Lanes 2r and 2r + 1 own key r of the warp's 16.
  const int r = lane / 2, half = lane % 2;
  const int64_t s = s0 + warp * kRows + r;
  // The first query that sees key s (causal: t + S - T >= s), and the block's first key.
  int64_t t_begin = a.causal ? s0 - (a.S - a.T) : 0;
  if (t_begin < 0) t_begin = 0;
  FragAcc dkf[D / 16], dvf[D / 16];
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
    wmma::fill_fragment(dkf[j], 0.0f);
    wmma::fill_fragment(dvf[j], 0.0f);
  }
  const int64_t group = a.Hq / a.Hkv;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t t0 = t_begin; t0 < a.T; t0 += kTile) {
      __syncthreads();  // the last tile's q, dout, lse and delta are read
      load_tile<T, D>(qs, q + b * a.q_sb + h / a.q_group * a.q_sh + h % a.q_group * a.q_sg, a.q_st, t0, a.T);
      load_tile<T, D>(gs, dout + b * a.g_sb + h * a.g_sh, a.g_st, t0, a.T);
      for (int i = threadIdx.x; i < kTile; i += kThreads) {
        const bool in = t0 + i < a.T;
        lse_s[i] = in ? lse[(b * a.Hq + h) * a.T + t0 + i] : kNegInf;
        delta_s[i] = in ? delta[(b * a.Hq + h) * a.T + t0 + i] : 0.0f;
      }
      __syncthreads();
      rows_times_tile_t<T, D>(sw, ks + warp * kRows * ld, qs);   // S^T: keys x queries
      rows_times_tile_t<T, D>(dpw, vs + warp * kRows * ld, gs);  // dP^T
      __syncwarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int64_t t = t0 + c;
        float pz = 0, ds = 0;
        if (s < a.S && lse_s[c] != kNegInf && s < kv_end(a, t)) {
          const float p = __expf(sw[r * kLdS + c] * a.scale - lse_s[c]);
          const float z = dropout_factor(a, b, h, t, s);
          pz = p * z;
          ds = p * (dpw[r * kLdS + c] * z - delta_s[c]);
        }
        pzw[r * kLdP + c] = convert<T>(pz);
        dsw[r * kLdP + c] = convert<T>(ds);
      }
      __syncwarp();
      accumulate_w_times_tile<T, D>(dvf, pzw, gs);
      accumulate_w_times_tile<T, D>(dkf, dsw, qs);
    }
  auto offset = [&](int i) { return row_kv(a, b, s0 + warp * kRows + i, hk) * D; };
  auto ok = [&](int i) { return s0 + warp * kRows + i < a.S; };
  write_rows<T, D>(dkf, a.scale, sw, dk, offset, ok);
  write_rows<T, D>(dvf, 1.0f, sw, dv, offset, ok);
}

// Opts each kernel in to its shared memory once per device (more than the 48
// KiB a launch gets by default).
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  QK_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;  // devices past 64: every call
  if (done.load(std::memory_order_acquire) & bit) return;
  QK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

// The shared memory one block may opt in to on the current device (227 KiB
// on Hopper, 99 KiB on consumer GPUs), read once per device.
size_t shared_optin_bytes() {
  static std::atomic<int> known[64] = {};
  int device = 0;
  QK_CUDA_CHECK(cudaGetDevice(&device));
  int n = device < 64 ? known[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    QK_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (device < 64) known[device].store(n, std::memory_order_relaxed);
  }
  return static_cast<size_t>(n);
}

template <int D> constexpr size_t most_bytes() { return fwd_bytes<D>() > bwd_bytes<D>() ? fwd_bytes<D>() : bwd_bytes<D>(); }

template <typename T, int D>
void forward(const AttentionShape& a, const void* q, const void* k, const void* v, void* out, float* lse,
             cudaStream_t stream) {
  static std::atomic<uint64_t> ready{0};
  allow_shared(tiled_fwd<T, D>, fwd_bytes<D>(), ready);
  const dim3 grid(static_cast<unsigned>(a.B * a.Hq), static_cast<unsigned>((a.T + kTile - 1) / kTile));
  tiled_fwd<T, D><<<grid, kThreads, fwd_bytes<D>(), stream>>>(a, static_cast<const T*>(q), static_cast<const T*>(k),
                                                              static_cast<const T*>(v), static_cast<T*>(out), lse);
  QK_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D>
void backward(const AttentionShape& a, const void* dout, const void* q, const void* k, const void* v,
              const float* lse, const float* delta, void* dq, void* dk, void* dv, cudaStream_t stream) {
  static std::atomic<uint64_t> ready_dq{0}, ready_dkv{0};
  allow_shared(tiled_dq<T, D>, bwd_bytes<D>(), ready_dq);
  allow_shared(tiled_dkv<T, D>, bwd_bytes<D>(), ready_dkv);
  const T* g = static_cast<const T*>(dout);
  const T* qp = static_cast<const T*>(q);
  const T* kp = static_cast<const T*>(k);
  const T* vp = static_cast<const T*>(v);
  if (a.T > 0) {
    const dim3 grid(static_cast<unsigned>(a.B * a.Hq), static_cast<unsigned>((a.T + kTile - 1) / kTile));
    tiled_dq<T, D><<<grid, kThreads, bwd_bytes<D>(), stream>>>(a, g, qp, kp, vp, lse, delta, static_cast<T*>(dq));
    QK_CUDA_CHECK(cudaGetLastError());
  }
  if (a.S > 0) {
    const dim3 grid(static_cast<unsigned>(a.B * a.Hkv), static_cast<unsigned>((a.S + kTile - 1) / kTile));
    tiled_dkv<T, D><<<grid, kThreads, bwd_bytes<D>(), stream>>>(a, g, qp, kp, vp, lse, delta, static_cast<T*>(dk),
                                                               static_cast<T*>(dv));
    QK_CUDA_CHECK(cudaGetLastError());
  }
}

// Calls f(T{}, std::integral_constant<int, D>{}) for a 16-bit dtype and a
// head dim the kernels are built for.
template <typename F>
void dispatch_tiled(int dtype, int64_t D, F&& f) {
  auto with_d = [&](auto tag) {
    switch (D) {
      case 32: return f(tag, std::integral_constant<int, 32>{});
      case 64: return f(tag, std::integral_constant<int, 64>{});
      case 128: return f(tag, std::integral_constant<int, 128>{});
    }
  };
  if (dtype == kBF16) return with_d(__nv_bfloat16{});
  if (dtype == kF16) return with_d(__half{});
}

}  // namespace

bool tiled_attention_fits(const AttentionShape& a, int dtype, std::initializer_list<const void*> ptrs) {
  if ((dtype != kBF16 && dtype != kF16) || a.D != a.Dv) return false;
  if (a.D != 32 && a.D != 64 && a.D != 128) return false;
  const size_t need = a.D == 32 ? most_bytes<32>() : a.D == 64 ? most_bytes<64>() : most_bytes<128>();
  if (need > shared_optin_bytes()) return false;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0) return false;
  if (a.B * a.Hq >= int64_t(1) << 31 || (a.T + kTile - 1) / kTile > 65535 || (a.S + kTile - 1) / kTile > 65535)
    return false;
  // Rows are read 16 bytes at a time: every row start a multiple of 8 values.
  for (int64_t stride : {a.q_sb, a.q_st, a.q_sh, a.q_sg, a.k_sb, a.k_ss, a.k_sh, a.v_sb, a.v_ss, a.v_sh, a.g_sb,
                         a.g_st, a.g_sh})
    if (stride % 8 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

void launch_tiled_attention_forward(const AttentionShape& a, int dtype, const void* q, const void* k, const void* v,
                                    void* out, float* lse, cudaStream_t stream) {
  if (a.B * a.Hq * a.T == 0) return;
  dispatch_tiled(dtype, a.D, [&](auto tag, auto d) {
    forward<decltype(tag), decltype(d)::value>(a, q, k, v, out, lse, stream);
  });
}

void launch_tiled_attention_backward(const AttentionShape& a, int dtype, const void* dout, const void* q,
                                     const void* k, const void* v, const void* out, const float* lse, float* delta,
                                     void* dq, void* dk, void* dv, cudaStream_t stream) {
  if (a.B * a.Hq == 0) return;
  if (a.T > 0) launch_attention_delta(a, dtype, dout, out, delta, stream);
  dispatch_tiled(dtype, a.D, [&](auto tag, auto d) {
    backward<decltype(tag), decltype(d)::value>(a, dout, q, k, v, lse, delta, dq, dk, dv, stream);
  });
}

}  // namespace qk::cuda

// Attention on CUDA with the CPU kernel's contract (src/tensor/cpu/
// flash_attention_fwd.cc, _bwd.cc): bottom-right causal mask, grouped-query
// heads, the value head dim apart from the key's, dropout from the same
// Philox stream, lse = log sum exp over the visible keys (-inf and a zero
// output for a query that sees none), f16/bf16 computed in f32.
//
// One warp per output row, keys (or queries) taken 32 at a time, one per
// lane: each lane computes its key's score, the warp shares max and sum
// (the online softmax), then every lane adds the 32 weighted value rows into
// its share of the head dims. Nothing of T x S is stored. The backward
// recomputes the probabilities from lse, as FlashAttention does, in two
// passes with no atomics (repeatable sums): dq per query row, then dk and dv
// per key row summing over the query heads of its group and the queries
// that see it. No tensor cores, K and V re-read per query row (cached in
// L2): the kernel for f32 and for the heads and layouts the tensor-core
// kernel (attention_tiled.cu) does not take.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attention_kernels.h"
#include "cuda_check.h"
#include "dtypes.cuh"
#include "attention_common.cuh"

namespace qk::cuda {

namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__device__ __forceinline__ float dot_row(const float* x, const T* y, int64_t n) {
  float acc = 0;
  for (int64_t d = 0; d < n; ++d) acc += x[d] * convert<float>(y[d]);
  return acc;
}

// Forward: warp w of the block takes row (b, h, t); shared per warp: q
// (scaled) [D], acc [Dv], and the chunk's 32 weights (lanes loop over head
// dims a different number of times, so values pass through shared memory,
// not shuffles inside those loops).
template <typename T>
__global__ void attention_fwd(AttentionShape a, const T* q, const T* k, const T* v, T* out, float* lse) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + warp;  // (b * Hq + h) * T + t
  if (row >= a.B * a.Hq * a.T) return;
  const int64_t t = row % a.T, h = row / a.T % a.Hq, b = row / a.T / a.Hq, hk = kv_head(a, h);
  float* qs = smem + warp * (a.D + a.Dv + kWarp);
  float* acc = qs + a.D;
  float* w = acc + a.Dv;
  const T* qrow = q + q_offset(a, b, t, h);
  for (int64_t d = lane; d < a.D; d += kWarp) qs[d] = convert<float>(qrow[d]) * a.scale;
  for (int64_t d = lane; d < a.Dv; d += kWarp) acc[d] = 0;
  __syncwarp();
  const T* kb = k + b * a.k_sb + hk * a.k_sh;
  const T* vb = v + b * a.v_sb + hk * a.v_sh;
  const float ninf = -std::numeric_limits<float>::infinity();
  float m = ninf, l = 0;
  const int64_t end = kv_end(a, t);
  for (int64_t s0 = 0; s0 < end; s0 += kWarp) {
    const int64_t s = s0 + lane;
    const bool on = s < end;
    const float score = on ? dot_row(qs, kb + s * a.k_ss, a.D) : ninf;
    const float m_new = fmaxf(m, warp_max(score));  // finite: key s0 is visible
    const float alpha = __expf(m - m_new);          // 0 while m is -inf
    const float p = on ? __expf(score - m_new) : 0.0f;
    l = l * alpha + warp_sum(p);
    w[lane] = on ? p * dropout_factor(a, b, h, t, s) : 0.0f;
    __syncwarp();
    const int n = static_cast<int>(end - s0 < kWarp ? end - s0 : kWarp);
    for (int64_t d = lane; d < a.Dv; d += kWarp) {
      float o = acc[d] * alpha;
      for (int j = 0; j < n; ++j) o += w[j] * convert<float>(vb[(s0 + j) * a.v_ss + d]);
      acc[d] = o;
    }
    __syncwarp();  // w is rewritten by the next chunk
    m = m_new;
  }
  const float inv = l > 0 ? 1.0f / l : 0.0f;  // a query that sees no key: zeros
  T* orow = out + ((b * a.T + t) * a.Hq + h) * a.Dv;
  for (int64_t d = lane; d < a.Dv; d += kWarp) orow[d] = convert<T>(acc[d] * inv);
  if (lane == 0) lse[(b * a.Hq + h) * a.T + t] = l > 0 ? m + logf(l) : ninf;
}

// delta[(b, h, t)] = sum_d dout * out (f32), a warp per row.
template <typename T>
__global__ void attention_delta(AttentionShape a, const T* dout, const T* out, float* delta) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + warp;
  if (row >= a.B * a.Hq * a.T) return;
  const int64_t t = row % a.T, h = row / a.T % a.Hq, b = row / a.T / a.Hq;
  const T* g = dout + b * a.g_sb + t * a.g_st + h * a.g_sh;
  const T* o = out + b * a.o_sb + t * a.o_st + h * a.o_sh;
  float acc = 0;
  for (int64_t d = lane; d < a.Dv; d += kWarp) acc += convert<float>(g[d]) * convert<float>(o[d]);
  acc = warp_sum(acc);
  if (lane == 0) delta[row] = acc;
}

// dq for row (b, h, t): sum over visible s of dS_ts k_s, times scale, with
// dS = P (dP Z - delta), dP = dout . v_s. Shared per warp: q [D], dout [Dv], dq [D].
template <typename T>
__global__ void attention_dq(AttentionShape a, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                             const float* delta, T* dq) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + warp;
  if (row >= a.B * a.Hq * a.T) return;
  const int64_t t = row % a.T, h = row / a.T % a.Hq, b = row / a.T / a.Hq, hk = kv_head(a, h);
  float* qs = smem + warp * (2 * a.D + a.Dv + kWarp);
  float* gs = qs + a.D;
  float* acc = gs + a.Dv;
  float* w = acc + a.D;  // the chunk's dS, as in the forward
  const T* qrow = q + q_offset(a, b, t, h);
  const T* grow = dout + b * a.g_sb + t * a.g_st + h * a.g_sh;
  for (int64_t d = lane; d < a.D; d += kWarp) {
    qs[d] = convert<float>(qrow[d]) * a.scale;
    acc[d] = 0;
  }
  for (int64_t d = lane; d < a.Dv; d += kWarp) gs[d] = convert<float>(grow[d]);
  __syncwarp();
  const T* kb = k + b * a.k_sb + hk * a.k_sh;
  const T* vb = v + b * a.v_sb + hk * a.v_sh;
  const float lrow = lse[row], dl = delta[row];
  const int64_t end = lrow == -std::numeric_limits<float>::infinity() ? 0 : kv_end(a, t);
  for (int64_t s0 = 0; s0 < end; s0 += kWarp) {
    const int64_t s = s0 + lane;
    float ds = 0;
    if (s < end) {
      const float p = __expf(dot_row(qs, kb + s * a.k_ss, a.D) - lrow);
      const float dp = dot_row(gs, vb + s * a.v_ss, a.Dv) * dropout_factor(a, b, h, t, s);
      ds = p * (dp - dl);
    }
    w[lane] = ds;
    __syncwarp();
    const int n = static_cast<int>(end - s0 < kWarp ? end - s0 : kWarp);
    for (int64_t d = lane; d < a.D; d += kWarp) {
      float o = acc[d];
      for (int j = 0; j < n; ++j) o += w[j] * convert<float>(kb[(s0 + j) * a.k_ss + d]);
      acc[d] = o;
    }
    __syncwarp();
  }
  T* out = dq + row_major_q(a, b, t, h);
  for (int64_t d = lane; d < a.D; d += kWarp) out[d] = convert<T>(acc[d] * a.scale);
}

// dk and dv for key row (b, hk, s): over the query heads of kv head hk and
// the queries t that see s, in order. Shared per warp: k [D], v [Dv], dk [D], dv [Dv].
template <typename T>
__global__ void attention_dkv(AttentionShape a, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                              const float* delta, T* dk, T* dv) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + warp;  // (b * Hkv + hk) * S + s
  if (row >= a.B * a.Hkv * a.S) return;
  const int64_t s = row % a.S, hk = row / a.S % a.Hkv, b = row / a.S / a.Hkv;
  float* ks = smem + warp * (2 * (a.D + a.Dv) + 2 * kWarp);
  float* vs = ks + a.D;
  float* dks = vs + a.Dv;
  float* dvs = dks + a.D;
  float* wds = dvs + a.Dv;  // the chunk's dS and P Z, as in the forward
  float* wpz = wds + kWarp;
  const T* krow = k + b * a.k_sb + s * a.k_ss + hk * a.k_sh;
  const T* vrow = v + b * a.v_sb + s * a.v_ss + hk * a.v_sh;
  for (int64_t d = lane; d < a.D; d += kWarp) {
    ks[d] = convert<float>(krow[d]) * a.scale;
    dks[d] = 0;
  }
  for (int64_t d = lane; d < a.Dv; d += kWarp) {
    vs[d] = convert<float>(vrow[d]);
    dvs[d] = 0;
  }
  __syncwarp();
  // Query t sees key s from t = s - (S - T) on (causal).
  int64_t t_begin = a.causal ? s - (a.S - a.T) : 0;
  if (t_begin < 0) t_begin = 0;
  const int64_t group = a.Hq / a.Hkv;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t t0 = t_begin; t0 < a.T; t0 += kWarp) {
      const int64_t t = t0 + lane;
      float ds = 0, pz = 0;
      if (t < a.T) {
        const int64_t qrow = (b * a.Hq + h) * a.T + t;
        const float p = __expf(dot_row(ks, q + q_offset(a, b, t, h), a.D) - lse[qrow]);
        const float z = dropout_factor(a, b, h, t, s);
        const float dp = dot_row(vs, dout + b * a.g_sb + t * a.g_st + h * a.g_sh, a.Dv);
        pz = p * z;
        ds = p * (dp * z - delta[qrow]);
      }
      wds[lane] = ds;
      wpz[lane] = pz;
      __syncwarp();
      const int n = static_cast<int>(a.T - t0 < kWarp ? a.T - t0 : kWarp);
      for (int64_t d = lane; d < a.D; d += kWarp) {
        float o = dks[d];
        for (int j = 0; j < n; ++j) o += wds[j] * convert<float>(q[q_offset(a, b, t0 + j, h) + d]);
        dks[d] = o;
      }
      for (int64_t d = lane; d < a.Dv; d += kWarp) {
        float o = dvs[d];
        for (int j = 0; j < n; ++j) o += wpz[j] * convert<float>(dout[b * a.g_sb + (t0 + j) * a.g_st + h * a.g_sh + d]);
        dvs[d] = o;
      }
      __syncwarp();
    }
  T* dko = dk + row_kv(a, b, s, hk) * a.D;
  T* dvo = dv + row_kv(a, b, s, hk) * a.Dv;
  for (int64_t d = lane; d < a.D; d += kWarp) dko[d] = convert<T>(dks[d] * a.scale);
  for (int64_t d = lane; d < a.Dv; d += kWarp) dvo[d] = convert<T>(dvs[d]);
}

constexpr int kWarpsPerBlock = 4;
constexpr size_t kSharedLimit = 48 << 10;  // without opting in to more

unsigned blocks_for(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// Floats of shared memory per warp: forward, dq, dk/dv.
size_t fwd_floats(const AttentionShape& a) { return static_cast<size_t>(a.D + a.Dv + kWarp); }
size_t dq_floats(const AttentionShape& a) { return static_cast<size_t>(2 * a.D + a.Dv + kWarp); }
size_t dkv_floats(const AttentionShape& a) { return static_cast<size_t>(2 * (a.D + a.Dv) + 2 * kWarp); }

}  // namespace

bool attention_fits(int64_t D, int64_t Dv) {
  AttentionShape a;
  a.D = D;
  a.Dv = Dv;
  const size_t most = std::max({fwd_floats(a), dq_floats(a), dkv_floats(a)});
  return kWarpsPerBlock * most * sizeof(float) <= kSharedLimit;
}

void launch_attention_forward(const AttentionShape& a, int dtype, const void* q, const void* k, const void* v,
                              void* out, float* lse, cudaStream_t stream) {
  const int64_t rows = a.B * a.Hq * a.T;
  if (rows == 0) return;
  const size_t smem = kWarpsPerBlock * fwd_floats(a) * sizeof(float);
  dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      attention_fwd<T><<<blocks_for(rows), kWarpsPerBlock * kWarp, smem, stream>>>(
          a, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out), lse);
      QK_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void launch_attention_delta(const AttentionShape& a, int dtype, const void* dout, const void* out, float* delta,
                            cudaStream_t stream) {
  const int64_t rows = a.B * a.Hq * a.T;
  if (rows == 0) return;
  dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      attention_delta<T><<<blocks_for(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
          a, static_cast<const T*>(dout), static_cast<const T*>(out), delta);
      QK_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void launch_attention_backward(const AttentionShape& a, int dtype, const void* dout, const void* q, const void* k,
                               const void* v, const void* out, const float* lse, float* delta, void* dq, void* dk,
                               void* dv, cudaStream_t stream) {
  const int64_t qrows = a.B * a.Hq * a.T, kvrows = a.B * a.Hkv * a.S;
  dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      const T* g = static_cast<const T*>(dout);
      const T* qp = static_cast<const T*>(q);
      const T* kp = static_cast<const T*>(k);
      const T* vp = static_cast<const T*>(v);
      if (qrows > 0) {
        launch_attention_delta(a, dtype, dout, out, delta, stream);
        const size_t smem = kWarpsPerBlock * dq_floats(a) * sizeof(float);
        attention_dq<T><<<blocks_for(qrows), kWarpsPerBlock * kWarp, smem, stream>>>(a, g, qp, kp, vp, lse, delta,
                                                                                  static_cast<T*>(dq));
        QK_CUDA_CHECK(cudaGetLastError());
      }
      if (kvrows > 0) {
        const size_t smem = kWarpsPerBlock * dkv_floats(a) * sizeof(float);
        attention_dkv<T><<<blocks_for(kvrows), kWarpsPerBlock * kWarp, smem, stream>>>(
            a, g, qp, kp, vp, lse, delta, static_cast<T*>(dk), static_cast<T*>(dv));
        QK_CUDA_CHECK(cudaGetLastError());
      }
    }
  });
}

}  // namespace qk::cuda

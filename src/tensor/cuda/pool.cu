// 2-D pooling on CUDA (NCHW, contiguous): max (with the CPU's index rule:
// the first maximum, or the last NaN; -1 where a dilated window misses the
// input), average (count_include_pad as PyTorch) and adaptive average, and
// their backward. The average pools' backward gathers: each input element
// sums the outputs whose windows hold it in ascending output order, the
// order the CPU accumulates in, with no atomics (results repeat run to run);
// max pool's scatters (below).
#include <cstdint>
#include <limits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"

namespace qk::cuda {

namespace {


#define QK_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void max_pool_fwd(T* y, int64_t* idx, const T* x, int64_t planes, PoolGeometry g) {
  using C = typename ComputeOf<T>::type;
  QK_GRID_LOOP(o, planes * g.ho * g.wo) {
    const int64_t ow = o % g.wo, oh = (o / g.wo) % g.ho, plane = o / (g.ho * g.wo);
    const T* xp = x + plane * g.h * g.w;
    const int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    const int64_t i0 = h0 < 0 ? (-h0 + g.dh - 1) / g.dh : 0, j0 = w0 < 0 ? (-w0 + g.dw - 1) / g.dw : 0;
    C best = -std::numeric_limits<C>::infinity();
    const int64_t ih0 = h0 + i0 * g.dh, iw0 = w0 + j0 * g.dw;
    int64_t best_i = ih0 < g.h && iw0 < g.w ? ih0 * g.w + iw0 : -1;
    for (int64_t i = i0; i < g.kh; ++i) {
      const int64_t ih = h0 + i * g.dh;
      if (ih >= g.h) break;
      for (int64_t j = j0; j < g.kw; ++j) {
        const int64_t iw = w0 + j * g.dw;
        if (iw >= g.w) break;
        const C v = convert<C>(xp[ih * g.w + iw]);
        if (v > best || v != v) {
          best = v;
          best_i = ih * g.w + iw;
        }
      }
    }
    y[o] = convert<T>(best);
    idx[o] = best_i;
  }
}

// Outputs whose window (start o*s - p, taps every d, k of them) can hold
// input i: [lo, hi] along one axis.
__device__ __forceinline__ void candidates(int64_t i, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out,
                                           int64_t* lo, int64_t* hi) {
  const int64_t first = i + p - (k - 1) * d;  // o*s >= first
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  const int64_t last = (i + p) / s;  // o*s <= i + p
  *hi = last < out - 1 ? last : out - 1;
}

// Max pool's backward scatters: the kernel table gives the indices but not
// the window parameters, so the outputs that reach an input are not known
// in advance. acc (C: f32, or f64 for f64) starts at zero; where windows
// overlap (stride < kernel) the order of the additions varies run to run.
template <typename T, typename C>
__global__ void max_pool_bwd(C* acc, const T* dy, const int64_t* idx, int64_t planes, PoolGeometry g) {
  QK_GRID_LOOP(o, planes * g.ho * g.wo) {
    const int64_t k = idx[o];
    // -1: a window with no input element. Beyond the plane: not indices of
    // max_pool2d on this x (the CPU raises IndexError; here they are skipped
    // rather than written out of bounds, which would kill the context).
    if (k < 0 || k >= g.h * g.w) continue;
    atomicAdd(acc + (o / (g.ho * g.wo)) * g.h * g.w + k, convert<C>(dy[o]));
  }
}

// The CPU's avg_window along one axis.
struct Window {
  int64_t start, end, padded;
};
__device__ __forceinline__ Window avg_window(int64_t o, int64_t k, int64_t s, int64_t pad, int64_t in) {
  const int64_t start = o * s - pad;
  const int64_t end = start + k < in + pad ? start + k : in + pad;
  return {start > 0 ? start : 0, end < in ? end : in, end - start};
}

__device__ __forceinline__ int64_t avg_count(const Window& a, const Window& b, bool include_pad) {
  return include_pad ? a.padded * b.padded : (a.end - a.start) * (b.end - b.start);
}

template <typename T>
__global__ void avg_pool_fwd(T* y, const T* x, int64_t planes, PoolGeometry g, bool include_pad) {
  using C = typename ComputeOf<T>::type;
  QK_GRID_LOOP(o, planes * g.ho * g.wo) {
    const int64_t ow = o % g.wo, oh = (o / g.wo) % g.ho, plane = o / (g.ho * g.wo);
    const T* xp = x + plane * g.h * g.w;
    const Window wh = avg_window(oh, g.kh, g.sh, g.ph, g.h), ww = avg_window(ow, g.kw, g.sw, g.pw, g.w);
    const int64_t count = avg_count(wh, ww, include_pad);
    C sum = 0;
    for (int64_t ih = wh.start; ih < wh.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw) sum += convert<C>(xp[ih * g.w + iw]);
    y[o] = convert<T>(count > 0 ? sum / static_cast<C>(count) : C(0));
  }
}

template <typename T>
__global__ void avg_pool_bwd(T* dx, const T* dy, int64_t planes, PoolGeometry g, bool include_pad) {
  using C = typename ComputeOf<T>::type;
  QK_GRID_LOOP(e, planes * g.h * g.w) {
    const int64_t hw = g.h * g.w, k = e % hw, plane = e / hw, ih = k / g.w, iw = k % g.w;
    int64_t oh0, oh1, ow0, ow1;
    candidates(ih, g.kh, g.sh, g.ph, 1, g.ho, &oh0, &oh1);
    candidates(iw, g.kw, g.sw, g.pw, 1, g.wo, &ow0, &ow1);
    C acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const Window wh = avg_window(oh, g.kh, g.sh, g.ph, g.h);
      if (ih < wh.start || ih >= wh.end) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Window ww = avg_window(ow, g.kw, g.sw, g.pw, g.w);
        if (iw < ww.start || iw >= ww.end) continue;
        const int64_t count = avg_count(wh, ww, include_pad);
        if (count <= 0) continue;
        acc += convert<C>(dy[plane * g.ho * g.wo + oh * g.wo + ow]) / static_cast<C>(count);
      }
    }
    dx[e] = convert<T>(acc);
  }
}

__device__ __forceinline__ int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
__device__ __forceinline__ int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void adaptive_fwd(T* y, const T* x, int64_t planes, PoolGeometry g) {
  using C = typename ComputeOf<T>::type;
  QK_GRID_LOOP(o, planes * g.ho * g.wo) {
    const int64_t ow = o % g.wo, oh = (o / g.wo) % g.ho, plane = o / (g.ho * g.wo);
    const T* xp = x + plane * g.h * g.w;
    const int64_t h0 = adaptive_start(oh, g.ho, g.h), h1 = adaptive_end(oh, g.ho, g.h);
    const int64_t w0 = adaptive_start(ow, g.wo, g.w), w1 = adaptive_end(ow, g.wo, g.w);
    C sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += convert<C>(xp[ih * g.w + iw]);
    y[o] = convert<T>(sum / static_cast<C>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void adaptive_bwd(T* dx, const T* dy, int64_t planes, PoolGeometry g) {
  using C = typename ComputeOf<T>::type;
  QK_GRID_LOOP(e, planes * g.h * g.w) {
    const int64_t hw = g.h * g.w, k = e % hw, plane = e / hw, ih = k / g.w, iw = k % g.w;
    C acc = 0;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const int64_t h0 = adaptive_start(oh, g.ho, g.h), h1 = adaptive_end(oh, g.ho, g.h);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t w0 = adaptive_start(ow, g.wo, g.w), w1 = adaptive_end(ow, g.wo, g.w);
        if (iw < w0 || iw >= w1) continue;
        acc += convert<C>(dy[plane * g.ho * g.wo + oh * g.wo + ow]) / static_cast<C>((h1 - h0) * (w1 - w0));
      }
    }
    dx[e] = convert<T>(acc);
  }
}

}  // namespace

void launch_pool(PoolKind kind, bool backward, void* out, const void* in, void* indices, int dtype, int64_t planes,
                 const PoolGeometry& g, bool count_include_pad, cudaStream_t s) {
  const int64_t n = planes * (backward ? g.h * g.w : g.ho * g.wo);
  if (n <= 0) return;
  dispatch_floating(dtype, [&](auto t) {
    using T = decltype(t);
    T* o = static_cast<T*>(out);
    const T* i = static_cast<const T*>(in);
    int64_t* idx = static_cast<int64_t*>(indices);
    switch (kind) {
      case PoolKind::kMax:
        if (backward) {
          using C = typename ComputeOf<T>::type;
          const int64_t outs = planes * g.ho * g.wo;
          max_pool_bwd<T, C><<<grid_for(outs), kBlock, 0, s>>>(static_cast<C*>(out), i, idx, planes, g);
        } else {
          max_pool_fwd<T><<<grid_for(n), kBlock, 0, s>>>(o, idx, i, planes, g);
        }
        break;
      case PoolKind::kAvg:
        if (backward) avg_pool_bwd<T><<<grid_for(n), kBlock, 0, s>>>(o, i, planes, g, count_include_pad);
        else avg_pool_fwd<T><<<grid_for(n), kBlock, 0, s>>>(o, i, planes, g, count_include_pad);
        break;
      case PoolKind::kAdaptiveAvg:
        if (backward) adaptive_bwd<T><<<grid_for(n), kBlock, 0, s>>>(o, i, planes, g);
        else adaptive_fwd<T><<<grid_for(n), kBlock, 0, s>>>(o, i, planes, g);
        break;
    }
    QK_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qk::cuda

// CPU pooling kernels: one (n, c) plane per task, windows as PyTorch's.
#include "cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "qk/base/thread_pool.h"

namespace qk::cpu {

namespace {

TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

// Runs fn(plane) for each of the N*C planes, grain sized to ~32K elements
// (not measured; docs/tensor.md, "Threads").
template <typename F>
void for_planes(int64_t planes, int64_t plane_work, F&& fn) {
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(plane_work, 1));
  parallel_for(0, planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i);
  });
}

// Adaptive window: [floor(o*in/out), ceil((o+1)*in/out)).
inline int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

// The 2x2/stride-2 window on bf16 bits: widening is a shift and the result
// is one of the inputs. GCC keeps the generic loop branchy and scalar for
// bf16 (SimpleCNN bf16 training: max_pool2d was 22% of the step, ~14 ns per
// output), so AVX-512 does 16 outputs at a time where the CPU has it, with
// the same choice as the generic loop: the first maximum, or the last NaN.
#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside its own AVX-512 headers under a target attribute (a
// known false positive about the intrinsics' undefined pass-through operand).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw,avx512vl")))
void max_pool_k2s2_bf16_avx512(const uint16_t* xp, uint16_t* yp, int64_t* ip, int64_t ho, int64_t wo,
                               int64_t w) {
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i lane2 = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i one = _mm512_set1_epi64(1);
  for (int64_t oh = 0; oh < ho; ++oh) {
    const int64_t r0 = 2 * oh * w, r1 = r0 + w;
    const uint16_t* x0 = xp + r0;
    const uint16_t* x1 = xp + r1;
    uint16_t* yrow = yp + oh * wo;
    int64_t* irow = ip + oh * wo;
    for (int64_t ow = 0; ow < wo; ow += 16) {
      // Up to 16 pairs per row (a mask for the last ones): each 32-bit lane
      // holds (b << 16) | a.
      const int64_t left = std::min<int64_t>(16, wo - ow);
      const __mmask16 live = static_cast<__mmask16>((1u << left) - 1);
      const __m512i v0 = _mm512_maskz_loadu_epi32(live, x0 + 2 * ow);
      const __m512i v1 = _mm512_maskz_loadu_epi32(live, x1 + 2 * ow);
      const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
      const __m512 b = _mm512_castsi512_ps(_mm512_and_si512(v0, hi_mask));
      const __m512 c = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
      const __m512 d = _mm512_castsi512_ps(_mm512_and_si512(v1, hi_mask));
      const __mmask16 tb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
      const __mmask16 td = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
      const __m512 top = _mm512_mask_blend_ps(tb, a, b), bottom = _mm512_mask_blend_ps(td, c, d);
      const __mmask16 tbot =
          _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ) | _mm512_cmp_ps_mask(bottom, bottom, _CMP_UNORD_Q);
      const __m512 best = _mm512_mask_blend_ps(tbot, top, bottom);
      _mm256_mask_storeu_epi16(yrow + ow, live,
                               _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(best), 16)));
      for (int half = 0; half < 2 && 8 * half < left; ++half) {
        const __mmask8 mb = static_cast<__mmask8>(tb >> (8 * half));
        const __mmask8 md = static_cast<__mmask8>(td >> (8 * half));
        const __mmask8 mbot = static_cast<__mmask8>(tbot >> (8 * half));
        const __mmask8 mlive = static_cast<__mmask8>(live >> (8 * half));
        const __m512i col = _mm512_add_epi64(_mm512_set1_epi64(2 * (ow + 8 * half)), lane2);
        const __m512i top_i = _mm512_add_epi64(_mm512_add_epi64(col, _mm512_set1_epi64(r0)),
                                               _mm512_maskz_mov_epi64(mb, one));
        const __m512i bot_i = _mm512_add_epi64(_mm512_add_epi64(col, _mm512_set1_epi64(r1)),
                                               _mm512_maskz_mov_epi64(md, one));
        _mm512_mask_storeu_epi64(irow + ow + 8 * half, mlive, _mm512_mask_blend_epi64(mbot, top_i, bot_i));
      }
    }
  }
}
#pragma GCC diagnostic pop
#endif

// Runs the AVX-512 path and returns true where the CPU has it; false: the
// caller's generic loop does the plane.
bool max_pool_k2s2_bf16(const uint16_t* xp, uint16_t* yp, int64_t* ip, int64_t ho, int64_t wo,
                        int64_t w) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl");
  if (avx512) {
    max_pool_k2s2_bf16_avx512(xp, yp, ip, ho, wo, w);
    return true;
  }
#endif
  (void)xp, (void)yp, (void)ip, (void)ho, (void)wo, (void)w;
  return false;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho,
                                     int64_t wo) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor out = empty({n, c, ho, wo}, like(x));
  Tensor idx = empty({n, c, ho, wo}, TensorOptions(DType::i64).device(x.device()));
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* src = x.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    int64_t* ind = idx.data_ptr<int64_t>();
    // The common 2x2/stride-2 window without padding: four loads per output,
    // no bounds checks (the general loop below costs ~7x more per element).
    const bool k2s2 = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 &&
                      dh == 1 && dw == 1 && 2 * ho <= h && 2 * wo <= w;
    for_planes(n * c, ho * wo * kh * kw, [&](int64_t plane) {
      const T* xp = src + plane * h * w;
      T* yp = dst + plane * ho * wo;
      int64_t* ip = ind + plane * ho * wo;
      if (k2s2) {
        // A branch-free pairwise tree, so the loop vectorises: (a, b) and
        // (c, d), then the two winners. It picks exactly what the sequential
        // scan below picks: the first maximum, or the last NaN.
        if constexpr (std::is_same_v<T, BFloat16>) {
          if (max_pool_k2s2_bf16(reinterpret_cast<const uint16_t*>(xp), reinterpret_cast<uint16_t*>(yp),
                                 ip, ho, wo, w))
            return;
        }
        for (int64_t oh = 0; oh < ho; ++oh) {
          const int64_t r0 = 2 * oh * w, r1 = r0 + w;
          const T* x0 = xp + r0;
          const T* x1 = xp + r1;
          T* yrow = yp + oh * wo;
          int64_t* irow = ip + oh * wo;
          for (int64_t ow = 0; ow < wo; ++ow) {
            // The result is one of the inputs: select its bits (no rounding
            // back from C, whose NaN and rounding branches kept bf16 scalar).
            const T ta = x0[2 * ow], tb = x0[2 * ow + 1], tc = x1[2 * ow], td = x1[2 * ow + 1];
            const C a = static_cast<C>(ta), b = static_cast<C>(tb);
            const C c = static_cast<C>(tc), d = static_cast<C>(td);
            const bool take_b = b > a || b != b;
            const bool take_d = d > c || d != d;
            const C top = take_b ? b : a, bottom = take_d ? d : c;
            const int64_t top_i = r0 + 2 * ow + take_b, bottom_i = r1 + 2 * ow + take_d;
            const bool take_bottom = bottom > top || bottom != bottom;
            const T ttop = take_b ? tb : ta, tbottom = take_d ? td : tc;
            yrow[ow] = take_bottom ? tbottom : ttop;
            irow[ow] = take_bottom ? bottom_i : top_i;
          }
        }
        return;
      }
      for (int64_t oh = 0; oh < ho; ++oh) {
        int64_t h0 = oh * sh - ph;
        // First in-bounds tap of the window (the pad check keeps one in range).
        int64_t i0 = h0 < 0 ? (-h0 + dh - 1) / dh : 0;
        for (int64_t ow = 0; ow < wo; ++ow) {
          int64_t w0 = ow * sw - pw;
          int64_t j0 = w0 < 0 ? (-w0 + dw - 1) / dw : 0;
          C best = -std::numeric_limits<C>::infinity();
          // The first tap, or -1 when a dilated window misses the input entirely.
          int64_t ih0 = h0 + i0 * dh, iw0 = w0 + j0 * dw;
          int64_t best_i = ih0 < h && iw0 < w ? ih0 * w + iw0 : -1;
          for (int64_t i = i0; i < kh; ++i) {
            int64_t ih = h0 + i * dh;
            if (ih >= h) break;
            for (int64_t j = j0; j < kw; ++j) {
              int64_t iw = w0 + j * dw;
              if (iw >= w) break;
              C v = static_cast<C>(xp[ih * w + iw]);
              if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                best = v;
                best_i = ih * w + iw;
              }
            }
          }
          yp[oh * wo + ow] = cast_value<T>(best);
          ip[oh * wo + ow] = best_i;
        }
      }
    });
  });
  return {out, idx};
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& indices) {
  const int64_t planes = x.size(0) * x.size(1), hw = x.size(2) * x.size(3);
  const int64_t ohw = grad_out.size(2) * grad_out.size(3);
  Tensor dx = zeros(x.shape(), like(x));
  dispatch_floating(x.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* dy = grad_out.data_ptr<T>();
    const int64_t* ind = indices.data_ptr<int64_t>();
    T* d = dx.data_ptr<T>();
    for_planes(planes, ohw, [&](int64_t plane) {
      T* dp = d + plane * hw;
      const T* gp = dy + plane * ohw;
      const int64_t* ip = ind + plane * ohw;
      for (int64_t o = 0; o < ohw; ++o) {
        int64_t k = ip[o];
        if (k == -1) continue;  // a window with no input element
        QK_CHECK_INDEX(k >= 0 && k < hw, "max_pool2d_backward: index ", k,
                       " outside the input plane of ", hw, " elements; indices must come from "
                       "max_pool2d on the same x");
        dp[k] = cast_value<T>(static_cast<C>(dp[k]) + static_cast<C>(gp[o]));
      }
    });
  });
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor out = empty({n, c, ho, wo}, like(x));
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* src = x.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_planes(n * c, ho * wo * p.kernel[0] * p.kernel[1], [&](int64_t plane) {
      const T* xp = src + plane * h * w;
      T* yp = dst + plane * ho * wo;
      for (int64_t oh = 0; oh < ho; ++oh) {
        Window wh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], h);
        for (int64_t ow = 0; ow < wo; ++ow) {
          Window ww = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], w);
          int64_t count = avg_count(wh, ww, p.count_include_pad);
          C sum = 0;
          for (int64_t ih = wh.start; ih < wh.end; ++ih)
            for (int64_t iw = ww.start; iw < ww.end; ++iw) sum += static_cast<C>(xp[ih * w + iw]);
          yp[oh * wo + ow] = cast_value<T>(count > 0 ? sum / static_cast<C>(count) : C(0));
        }
      }
    });
  });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Tensor& x, const ops::Pool2dParams& p) {
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = grad_out.size(2), wo = grad_out.size(3);
  Tensor dx = empty(x.shape(), like(x));
  dispatch_floating(x.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* dy = grad_out.data_ptr<T>();
    T* d = dx.data_ptr<T>();
    for_planes(planes, ho * wo * p.kernel[0] * p.kernel[1], [&](int64_t plane) {
      // Accumulate the plane in the compute type, round once.
      std::vector<C> acc(h * w, C(0));
      const T* gp = dy + plane * ho * wo;
      for (int64_t oh = 0; oh < ho; ++oh) {
        Window wh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], h);
        for (int64_t ow = 0; ow < wo; ++ow) {
          Window ww = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], w);
          int64_t count = avg_count(wh, ww, p.count_include_pad);
          if (count <= 0) continue;
          C g = static_cast<C>(gp[oh * wo + ow]) / static_cast<C>(count);
          for (int64_t ih = wh.start; ih < wh.end; ++ih)
            for (int64_t iw = ww.start; iw < ww.end; ++iw) acc[ih * w + iw] += g;
        }
      }
      T* dp = d + plane * h * w;
      for (int64_t i = 0; i < h * w; ++i) dp[i] = cast_value<T>(acc[i]);
    });
  });
  return dx;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = out_size[0], wo = out_size[1];
  Tensor out = empty({n, c, ho, wo}, like(x));
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* src = x.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_planes(n * c, h * w, [&](int64_t plane) {
      const T* xp = src + plane * h * w;
      T* yp = dst + plane * ho * wo;
      for (int64_t oh = 0; oh < ho; ++oh) {
        int64_t h0 = adaptive_start(oh, ho, h), h1 = adaptive_end(oh, ho, h);
        for (int64_t ow = 0; ow < wo; ++ow) {
          int64_t w0 = adaptive_start(ow, wo, w), w1 = adaptive_end(ow, wo, w);
          C sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<C>(xp[ih * w + iw]);
          yp[oh * wo + ow] = cast_value<T>(sum / static_cast<C>((h1 - h0) * (w1 - w0)));
        }
      }
    });
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& x) {
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = grad_out.size(2), wo = grad_out.size(3);
  Tensor dx = empty(x.shape(), like(x));
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* dy = grad_out.data_ptr<T>();
    T* d = dx.data_ptr<T>();
    for_planes(planes, h * w, [&](int64_t plane) {
      std::vector<C> acc(h * w, C(0));
      const T* gp = dy + plane * ho * wo;
      for (int64_t oh = 0; oh < ho; ++oh) {
        int64_t h0 = adaptive_start(oh, ho, h), h1 = adaptive_end(oh, ho, h);
        for (int64_t ow = 0; ow < wo; ++ow) {
          int64_t w0 = adaptive_start(ow, wo, w), w1 = adaptive_end(ow, wo, w);
          C g = static_cast<C>(gp[oh * wo + ow]) / static_cast<C>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[ih * w + iw] += g;
        }
      }
      T* dp = d + plane * h * w;
      for (int64_t i = 0; i < h * w; ++i) dp[i] = cast_value<T>(acc[i]);
    });
  });
  return dx;
}

}  // namespace qk::cpu

// Convolution as im2col + GEMM (f32 and f64): the portable path.
//
// For one sample and group, the receptive fields are unrolled into
//   col [Cg*kh*kw, Ho*Wo]        row r = (c*kh + i)*kw + j
// so that
//   forward    y[n,g]  [Og, HoWo]   = W[g] [Og, CgKK] . col
//   backward   dW[g]   [Og, CgKK]  += dy[n,g] . col^T
//              dcol    [CgKK, HoWo] = W[g]^T . dy[n,g], then col2im adds it into dx.
// Samples are split across threads, each with its own col buffer (and its
// own dW accumulator, summed at the end); BLAS runs single-threaded inside
// (Note [One thread pool] in gemm.h).
// A 1x1, stride-1, unpadded convolution skips the unrolling: col is x itself.
#include <algorithm>
#include <cstring>
#include <vector>

#include "qk/base/thread_pool.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"

namespace qk::cpu {

namespace {

bool is_pointwise(const ConvGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// The output columns ow whose input column ow*s - p + j*d lies in [0, w).
inline void valid_range(int64_t wo, int64_t w, int64_t s, int64_t off, int64_t& lo,
                        int64_t& hi) {
  // ow*s + off >= 0  and  ow*s + off < w
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = off >= w ? 0 : (w - off + s - 1) / s;
  lo = std::min(lo, wo);
  hi = std::clamp(hi, lo, wo);
}

// x [Cg,H,W] -> col [Cg*kh*kw, Ho*Wo]
template <typename T>
void im2col(const T* x, const ConvGeom& g, T* col) {
  const int64_t hw = g.ho * g.wo;
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * hw;
        const int64_t woff = j * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(g.wo, g.w, g.sw, woff, lo, hi);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          T* dst = row + oh * g.wo;
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = x + (c * g.h + ih) * g.w + woff;
          std::fill(dst, dst + lo, T(0));
          if (g.sw == 1) {
            std::memcpy(dst + lo, src + lo, sizeof(T) * (hi - lo));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * g.sw];
          }
          std::fill(dst + hi, dst + g.wo, T(0));
        }
      }
}

// dx [Cg,H,W] += col2im(dcol [Cg*kh*kw, Ho*Wo])
template <typename T>
void col2im_add(const T* col, const ConvGeom& g, T* dx) {
  const int64_t hw = g.ho * g.wo;
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * hw;
        const int64_t woff = j * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(g.wo, g.w, g.sw, woff, lo, hi);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* src = row + oh * g.wo;
          T* dst = dx + (c * g.h + ih) * g.w + woff;
          for (int64_t ow = lo; ow < hi; ++ow) dst[ow * g.sw] += src[ow];
        }
      }
}

// Runs fn(worker, n_lo, n_hi) over the batch split into one range per
// worker. With one worker the GEMMs themselves use every thread (gemm()
// splits them); inside a worker they run on that worker's thread.
template <typename F>
void for_each_worker(int64_t n, F&& fn) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n));
  if (workers == 1 || in_parallel_region()) {
    fn(int64_t{0}, int64_t{0}, n);
    return;
  }
  parallel_for(0, workers, 1, [&](int64_t wlo, int64_t whi) {
    for (int64_t t = wlo; t < whi; ++t) fn(t, n * t / workers, n * (t + 1) / workers);
  });
}

int64_t worker_count(int64_t n) {
  if (in_parallel_region()) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(num_threads(), n));
}

template <typename T>
void forward_typed(const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t hw = g.ho * g.wo, kk = g.cg() * g.kh * g.kw;
  const bool pointwise = is_pointwise(g);
  for_each_worker(g.n, [&](int64_t, int64_t lo, int64_t hi) {
    std::vector<T> col(pointwise ? 0 : kk * hw);
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t gi = 0; gi < g.g; ++gi) {
        const T* xg = x + (n * g.c + gi * g.cg()) * g.h * g.w;
        const T* src = xg;
        if (!pointwise) {
          im2col(xg, g, col.data());
          src = col.data();
        }
        T* yg = y + (n * g.o + gi * g.og()) * hw;
        gemm<T>(false, false, g.og(), hw, kk, T(1), w + gi * g.og() * kk, kk, src, hw, T(0), yg,
                hw);
        if (b)
          for (int64_t o = 0; o < g.og(); ++o) {
            const T bv = b[gi * g.og() + o];
            T* row = yg + o * hw;
            for (int64_t i = 0; i < hw; ++i) row[i] += bv;
          }
      }
  });
}

template <typename T>
void backward_typed(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw) {
  const int64_t hw = g.ho * g.wo, kk = g.cg() * g.kh * g.kw;
  const bool pointwise = is_pointwise(g);
  const int64_t wnumel = g.o * kk;
  const int64_t workers = worker_count(g.n);
  // Worker 0 accumulates straight into dw; the others into scratch, summed below.
  std::vector<T> partial(dw ? (workers - 1) * wnumel : 0, T(0));
  if (dw) std::fill(dw, dw + wnumel, T(0));
  for_each_worker(g.n, [&](int64_t t, int64_t lo, int64_t hi) {
    std::vector<T> col(pointwise ? 0 : kk * hw);
    T* dw_acc = dw ? (t == 0 ? dw : partial.data() + (t - 1) * wnumel) : nullptr;
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t gi = 0; gi < g.g; ++gi) {
        const T* dyg = dy + (n * g.o + gi * g.og()) * hw;
        const T* wg = w + gi * g.og() * kk;
        const int64_t xoff = (n * g.c + gi * g.cg()) * g.h * g.w;
        if (dw_acc) {
          const T* src = x + xoff;
          if (!pointwise) {
            im2col(x + xoff, g, col.data());
            src = col.data();
          }
          gemm<T>(false, true, g.og(), kk, hw, T(1), dyg, hw, src, hw, T(1),
                  dw_acc + gi * g.og() * kk, kk);
        }
        if (dx) {
          if (pointwise) {  // dx[n,g] = W^T . dy directly
            gemm<T>(true, false, kk, hw, g.og(), T(1), wg, kk, dyg, hw, T(0), dx + xoff, hw);
          } else {
            gemm<T>(true, false, kk, hw, g.og(), T(1), wg, kk, dyg, hw, T(0), col.data(), hw);
            std::fill(dx + xoff, dx + xoff + g.cg() * g.h * g.w, T(0));
            col2im_add(col.data(), g, dx + xoff);
          }
        }
      }
  });
  for (int64_t t = 1; t < workers && dw; ++t) {
    const T* p = partial.data() + (t - 1) * wnumel;
    for (int64_t i = 0; i < wnumel; ++i) dw[i] += p[i];
  }
}

}  // namespace

Tensor conv2d_forward_im2col(const Tensor& x, const Tensor& w, const Tensor& b,
                             const ops::Conv2dParams& p) {
  ConvGeom g = conv_geom(x, w, p);
  Tensor y = empty({g.n, g.o, g.ho, g.wo}, TensorOptions(x.dtype()).device(x.device()));
  if (y.numel() == 0) return y;
  dispatch_floating(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      forward_typed<T>(g, x.data_ptr<T>(), w.data_ptr<T>(), b.defined() ? b.data_ptr<T>() : nullptr,
                       y.data_ptr<T>());
    } else {
      QK_INTERNAL_ASSERT(false, "conv2d im2col called with ", dtype_name(x.dtype()));
    }
  });
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward_im2col(const Tensor& grad_out,
                                                          const Tensor& x, const Tensor& w,
                                                          const ops::Conv2dParams& p,
                                                          bool need_dx, bool need_dw,
                                                          bool need_db) {
  ConvGeom g = conv_geom(x, w, p);
  Tensor dx = need_dx ? empty(x.shape(), TensorOptions(x.dtype()).device(x.device())) : Tensor();
  Tensor dw = need_dw ? empty(w.shape(), TensorOptions(w.dtype()).device(w.device())) : Tensor();
  if (need_dx && grad_out.numel() == 0) dx.zero_();
  if (need_dw && grad_out.numel() == 0) dw.zero_();
  if ((need_dx || need_dw) && grad_out.numel() > 0) {
    dispatch_floating(x.dtype(), "conv2d_backward", [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        backward_typed<T>(g, grad_out.data_ptr<T>(), x.data_ptr<T>(), w.data_ptr<T>(),
                          need_dx ? dx.data_ptr<T>() : nullptr,
                          need_dw ? dw.data_ptr<T>() : nullptr);
      } else {
        QK_INTERNAL_ASSERT(false, "conv2d im2col called with ", dtype_name(x.dtype()));
      }
    });
  }
  Tensor db = need_db ? conv2d_bias_grad(grad_out) : Tensor();
  return {dx, dw, db};
}

}  // namespace qk::cpu

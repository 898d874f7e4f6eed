// CPU pooling of channels-last tensors (memory_format.h): x stored
// [N, H, W, C], so each window tap is a run of C contiguous values and the
// loops go over the channels innermost. The windows, the choice of the
// maximum (the first, or the last NaN), the -1 index of a dilated window
// that misses the input and count_include_pad are pool.cc's. Parallel over
// the images (a backward's scatter stays inside its image).
#include "cpu/pool.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/memory_format.h"

namespace qk::cpu {

namespace {

TensorOptions opts_of(const Tensor& t, DType d) { return TensorOptions(d).device(t.device()); }

Tensor empty_nhwc(const Shape& s, TensorOptions o) { return ops::empty(s, o, ops::MemoryFormat::channels_last); }

// A 4-D tensor's element (n, c, h, w) as stored channels last, counted from
// its first element.
struct Nhwc {
  int64_t H, W, C;
  int64_t at(int64_t n, int64_t h, int64_t w) const { return ((n * H + h) * W + w) * C; }
};

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_nhwc(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Tensor xc = ops::contiguous(x, ops::MemoryFormat::channels_last);
  Tensor out = empty_nhwc({n, c, ho, wo}, opts_of(x, x.dtype()));
  Tensor idx = empty_nhwc({n, c, ho, wo}, opts_of(x, DType::i64));
  const Nhwc in{h, w, c}, o{ho, wo, c};
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* src = xc.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    int64_t* ind = idx.data_ptr<int64_t>();
    parallel_for(0, n * ho, 1, [&](int64_t lo, int64_t hi) {
      std::vector<A> best(static_cast<size_t>(c));
      std::vector<int64_t> arg(static_cast<size_t>(c));
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t b = row / ho, oh = row % ho;
        const int64_t h0 = oh * sh - ph;
        for (int64_t ow = 0; ow < wo; ++ow) {
          const int64_t w0 = ow * sw - pw;
          std::fill(best.begin(), best.end(), -std::numeric_limits<A>::infinity());
          // The first in-bounds tap, or -1 when a dilated window misses the input.
          const int64_t i0 = h0 < 0 ? (-h0 + dh - 1) / dh : 0, j0 = w0 < 0 ? (-w0 + dw - 1) / dw : 0;
          const int64_t ih0 = h0 + i0 * dh, iw0 = w0 + j0 * dw;
          std::fill(arg.begin(), arg.end(), ih0 < h && iw0 < w ? ih0 * w + iw0 : -1);
          for (int64_t i = i0; i < kh; ++i) {
            const int64_t ih = h0 + i * dh;
            if (ih >= h) break;
            for (int64_t j = j0; j < kw; ++j) {
              const int64_t iw = w0 + j * dw;
              if (iw >= w) break;
              const T* tap = src + in.at(b, ih, iw);
              const int64_t k = ih * w + iw;
              // Branch-free over the channels, so the loop vectorises.
              A* __restrict bp = best.data();
              int64_t* __restrict ap = arg.data();
#pragma omp simd
              for (int64_t ch = 0; ch < c; ++ch) {
                const A v = static_cast<A>(tap[ch]);
                const bool take = v > bp[ch] || v != v;  // NaN propagates, as in PyTorch
                bp[ch] = take ? v : bp[ch];
                ap[ch] = take ? k : ap[ch];
              }
            }
          }
          T* y = dst + o.at(b, oh, ow);
          int64_t* yi = ind + o.at(b, oh, ow);
          for (int64_t ch = 0; ch < c; ++ch) {
            y[ch] = cast_value<T>(best[ch]);
            yi[ch] = arg[ch];
          }
        }
      }
    });
  });
  return {out, idx};
}

Tensor max_pool2d_backward_nhwc(const Tensor& grad_out, const Tensor& x, const Tensor& indices) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = grad_out.size(2), wo = grad_out.size(3);
  const Tensor gy = ops::contiguous(grad_out, ops::MemoryFormat::channels_last);
  const Tensor ix = ops::contiguous(indices, ops::MemoryFormat::channels_last);
  Tensor dx = empty_nhwc(x.shape(), opts_of(x, x.dtype()));
  const Nhwc in{h, w, c}, o{ho, wo, c};
  dispatch_floating(x.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* g = gy.data_ptr<T>();
    const int64_t* ind = ix.data_ptr<int64_t>();
    T* d = dx.data_ptr<T>();
    parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        T* db = d + in.at(b, 0, 0);
        std::fill(db, db + h * w * c, T(0));
        for (int64_t oh = 0; oh < ho; ++oh) {
          for (int64_t ow = 0; ow < wo; ++ow) {
            const T* gp = g + o.at(b, oh, ow);
            const int64_t* ip = ind + o.at(b, oh, ow);
            for (int64_t ch = 0; ch < c; ++ch) {
              const int64_t k = ip[ch];
              if (k == -1) continue;  // a window with no input element
              QK_CHECK_INDEX(k >= 0 && k < h * w, "max_pool2d_backward: index ", k,
                             " outside the input plane of ", h * w,
                             " elements; indices must come from max_pool2d on the same x");
              T& e = db[k * c + ch];
              e = cast_value<T>(static_cast<A>(e) + static_cast<A>(gp[ch]));
            }
          }
        }
      }
    });
  });
  return dx;
}

Tensor avg_pool2d_nhwc(const Tensor& x, const ops::Pool2dParams& p, int64_t ho, int64_t wo) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Tensor xc = ops::contiguous(x, ops::MemoryFormat::channels_last);
  Tensor out = empty_nhwc({n, c, ho, wo}, opts_of(x, x.dtype()));
  const Nhwc in{h, w, c}, o{ho, wo, c};
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* src = xc.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    parallel_for(0, n * ho, 1, [&](int64_t lo, int64_t hi) {
      std::vector<A> sum(static_cast<size_t>(c));
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t b = row / ho, oh = row % ho;
        const Window sh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], h);
        for (int64_t ow = 0; ow < wo; ++ow) {
          const Window sw = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], w);
          const int64_t count = avg_count(sh, sw, p.count_include_pad);
          std::fill(sum.begin(), sum.end(), A(0));
          for (int64_t ih = sh.start; ih < sh.end; ++ih)
            for (int64_t iw = sw.start; iw < sw.end; ++iw) {
              const T* tap = src + in.at(b, ih, iw);
              for (int64_t ch = 0; ch < c; ++ch) sum[ch] += static_cast<A>(tap[ch]);
            }
          T* y = dst + o.at(b, oh, ow);
          for (int64_t ch = 0; ch < c; ++ch) y[ch] = cast_value<T>(count > 0 ? sum[ch] / static_cast<A>(count) : A(0));
        }
      }
    });
  });
  return out;
}

Tensor avg_pool2d_backward_nhwc(const Tensor& grad_out, const Tensor& x, const ops::Pool2dParams& p) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = grad_out.size(2), wo = grad_out.size(3);
  const Tensor gy = ops::contiguous(grad_out, ops::MemoryFormat::channels_last);
  Tensor dx = empty_nhwc(x.shape(), opts_of(x, x.dtype()));
  const Nhwc in{h, w, c}, o{ho, wo, c};
  dispatch_floating(x.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* g = gy.data_ptr<T>();
    T* d = dx.data_ptr<T>();
    parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      // One image accumulated in the compute type, rounded once.
      std::vector<A> acc(static_cast<size_t>(h * w * c));
      for (int64_t b = lo; b < hi; ++b) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t oh = 0; oh < ho; ++oh) {
          const Window sh = avg_window(oh, p.kernel[0], p.stride[0], p.padding[0], h);
          for (int64_t ow = 0; ow < wo; ++ow) {
            const Window sw = avg_window(ow, p.kernel[1], p.stride[1], p.padding[1], w);
            const int64_t count = avg_count(sh, sw, p.count_include_pad);
            if (count <= 0) continue;
            const T* gp = g + o.at(b, oh, ow);
            for (int64_t ih = sh.start; ih < sh.end; ++ih)
              for (int64_t iw = sw.start; iw < sw.end; ++iw) {
                A* a = acc.data() + (ih * w + iw) * c;
                for (int64_t ch = 0; ch < c; ++ch) a[ch] += static_cast<A>(gp[ch]) / static_cast<A>(count);
              }
          }
        }
        T* db = d + in.at(b, 0, 0);
        for (int64_t i = 0; i < h * w * c; ++i) db[i] = cast_value<T>(acc[static_cast<size_t>(i)]);
      }
    });
  });
  return dx;
}

}  // namespace qk::cpu

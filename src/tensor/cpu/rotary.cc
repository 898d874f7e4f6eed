// Rotary embedding on the CPU. With h = R/2, lo = dims [0, h), hi = [h, R):
//   rotate_half(x) = cat(-x_hi, x_lo), so
//   y_lo = x_lo * cos_lo - x_hi * sin_lo,   y_hi = x_hi * cos_hi + x_lo * sin_hi.
// The map is linear in x; its transpose (the backward) is
//   dx_lo = g_lo * cos_lo + g_hi * sin_hi,  dx_hi = g_hi * cos_hi - g_lo * sin_lo.
// Both are  out_lo = a_lo * cos_lo + a_hi * P,  out_hi = a_hi * cos_hi + a_lo * Q
// with (P, Q) = (-sin_lo, sin_hi) forward and (sin_hi, -sin_lo) backward.
// cos_lo == cos_hi in Megatron's cat(freqs, freqs) layout, but nothing here
// assumes it. One task item is one row of D (a head at a position).
#include "cpu/rotary.h"

#include "qk/base/thread_pool.h"
#include "cpu/norm_lanes.h"

namespace qk::cpu {
namespace {

template <typename T, typename S>
void rotate_row(const T* __restrict x, T* __restrict y, const S* __restrict c,
                const S* __restrict s, int64_t h, int64_t D, bool backward) {
  using A = acc_t<T>;
  const S* s_lo = s;
  const S* s_hi = s + h;
  if (!backward) {
    for (int64_t j = 0; j < h; ++j) {
      const A lo = ld<A>(x, j), hi = ld<A>(x, j + h);
      st(y, j, lo * static_cast<A>(c[j]) - hi * static_cast<A>(s_lo[j]));
      st(y, j + h, hi * static_cast<A>(c[j + h]) + lo * static_cast<A>(s_hi[j]));
    }
  } else {
    for (int64_t j = 0; j < h; ++j) {
      const A lo = ld<A>(x, j), hi = ld<A>(x, j + h);
      st(y, j, lo * static_cast<A>(c[j]) + hi * static_cast<A>(s_hi[j]));
      st(y, j + h, hi * static_cast<A>(c[j + h]) - lo * static_cast<A>(s_lo[j]));
    }
  }
  for (int64_t j = 2 * h; j < D; ++j) y[j] = x[j];  // dims past R pass through
}

template <typename T, typename S>
Tensor rotary_impl(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward) {
  const int64_t B = x.size(0), T_ = x.size(1), H = x.size(2), D = x.size(3);
  const int64_t R = cos.size(1), h = R / 2;
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const S* cp = cos.data_ptr<S>();
  const S* sp = sin.data_ptr<S>();
  const int64_t sb = x.stride(0), st_ = x.stride(1), sh = x.stride(2);
  const int64_t rows = B * T_ * H;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const int64_t hd = r % H, t = (r / H) % T_, b = r / (H * T_);
                   rotate_row(xp + b * sb + t * st_ + hd * sh, op + r * D, cp + t * R,
                              sp + t * R, h, D, backward);
                 }
               });
  return out;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward) {
  return dispatch_floating(x.dtype(), "rotary_embedding", [&](auto tag) {
    using T = decltype(tag);
    if (cos.dtype() == DType::f64) return rotary_impl<T, double>(x, cos, sin, backward);
    return rotary_impl<T, float>(x, cos, sin, backward);
  });
}

}  // namespace qk::cpu

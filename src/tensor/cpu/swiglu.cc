// SwiGLU on the CPU, one row of 2F inputs per task item. With a = x[:F],
// b = x[F:], s = sigmoid(a):
//   y  = a * s * b
//   da = g * b * s * (1 + a * (1 - s)),   db = g * a * s
// sigmoid goes through exp_vec (softmax.h) so the loops vectorise; a very
// negative a gives s = 0 and y = -0, a very positive one s = 1.
#include "cpu/swiglu.h"

#include "qk/base/thread_pool.h"
#include "cpu/norm_lanes.h"
#include "cpu/loops.h"
#include "cpu/softmax.h"

namespace qk::cpu {
namespace {

template <typename A>
inline A sigmoid(A a) {
  return A(1) / (A(1) + exp_vec(-a));
}

template <typename T>
void swiglu_row(const T* __restrict x, T* __restrict y, int64_t F) {
  using A = acc_t<T>;
  for (int64_t j = 0; j < F; ++j) {
    const A a = ld<A>(x, j), b = ld<A>(x, j + F);
    st(y, j, a * sigmoid(a) * b);
  }
}

template <typename T>
void swiglu_backward_row(const T* __restrict g, const T* __restrict x, T* __restrict dx,
                         int64_t F) {
  using A = acc_t<T>;
  for (int64_t j = 0; j < F; ++j) {
    const A a = ld<A>(x, j), b = ld<A>(x, j + F), gj = ld<A>(g, j);
    const A s = sigmoid(a);
    st(dx, j, gj * b * s * (A(1) + a * (A(1) - s)));
    st(dx, j + F, gj * a * s);
  }
}

Shape half_last(const Shape& s) {
  Shape out = s;
  out.back() /= 2;
  return out;
}

}  // namespace

Tensor swiglu(const Tensor& x) {
  const int64_t F = x.size(-1) / 2, rows = F == 0 ? 0 : x.numel() / (2 * F);
  Tensor y = empty(half_last(x.shape()), TensorOptions(x.dtype()).device(x.device()));
  dispatch_floating(x.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    parallel_for(0, rows, row_grain(F), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) swiglu_row(xp + r * 2 * F, yp + r * F, F);
    });
  });
  return y;
}

Tensor swiglu_backward(const Tensor& grad, const Tensor& x) {
  const int64_t F = x.size(-1) / 2, rows = F == 0 ? 0 : x.numel() / (2 * F);
  Tensor dx = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  dispatch_floating(x.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = grad.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    T* dp = dx.data_ptr<T>();
    parallel_for(0, rows, row_grain(F), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        swiglu_backward_row(gp + r * F, xp + r * 2 * F, dp + r * 2 * F, F);
    });
  });
  return dx;
}

}  // namespace qk::cpu

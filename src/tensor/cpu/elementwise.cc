// Elementwise CPU kernels: binary, unary, their derivatives, clamp, where.
#include <cmath>

#include "cpu/kernels.h"
#include "cpu/loops.h"
#include "qk/base/vec_math.h"

namespace qk::cpu {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhC = 0.044715;

// Runs f(out_row, a_row, b_row) specialised for the common stride patterns so
// the compiler can vectorise the contiguous and scalar-operand cases.
template <typename O, typename A, typename B, typename F>
void binary_rows(const StridedLayout<3>& L, F f) {
  for_each_row<3>(L, [&f](char* const* p, const int64_t* st, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const B bv = b[0];
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const A av = a[0];
      for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(a[i * st[1]], b[i * st[2]]);
    }
  });
}

template <typename T>
void binary_arith(BinaryOp op, const StridedLayout<3>& L) {
  using C = compute_t<T>;
  auto conv = [](T v) { return static_cast<C>(cast_value<C>(v)); };
  auto out = [](C v) { return cast_value<T>(v); };
  // One specialised loop per op: the switch stays out of the inner loop.
  switch (op) {
    case BinaryOp::add: binary_rows<T, T, T>(L, [&](T a, T b) { return out(conv(a) + conv(b)); }); return;
    case BinaryOp::sub: binary_rows<T, T, T>(L, [&](T a, T b) { return out(conv(a) - conv(b)); }); return;
    case BinaryOp::mul: binary_rows<T, T, T>(L, [&](T a, T b) { return out(conv(a) * conv(b)); }); return;
    case BinaryOp::div: binary_rows<T, T, T>(L, [&](T a, T b) { return out(conv(a) / conv(b)); }); return;
    case BinaryOp::pow:
      binary_rows<T, T, T>(L, [&](T a, T b) { return out(static_cast<C>(std::pow(conv(a), conv(b)))); });
      return;
    case BinaryOp::maximum:
      binary_rows<T, T, T>(L, [&](T a, T b) {
        C x = conv(a), y = conv(b);
        return out((x != x || x > y) ? x : y);
      });
      return;
    case BinaryOp::minimum:
      binary_rows<T, T, T>(L, [&](T a, T b) {
        C x = conv(a), y = conv(b);
        return out((x != x || x < y) ? x : y);
      });
      return;
    default: break;
  }
  QK_INTERNAL_ASSERT(false, "binary_arith: comparison op routed here");
}

template <typename T>
void binary_compare(BinaryOp op, const StridedLayout<3>& L) {
  using C = compute_t<T>;
  auto conv = [](T v) { return cast_value<C>(v); };
  switch (op) {
    case BinaryOp::eq: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) == conv(b); }); return;
    case BinaryOp::ne: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) != conv(b); }); return;
    case BinaryOp::lt: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) < conv(b); }); return;
    case BinaryOp::le: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) <= conv(b); }); return;
    case BinaryOp::gt: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) > conv(b); }); return;
    case BinaryOp::ge: binary_rows<bool, T, T>(L, [&](T a, T b) { return conv(a) >= conv(b); }); return;
    default: break;
  }
  QK_INTERNAL_ASSERT(false, "binary_compare: arithmetic op routed here");
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

// Always inlined into the per-op loops below (op is a compile-time constant
// there): the switch folds away and the float loops of exp, gelu, erf, silu
// and sigmoid vectorize through vec_math.h; as a call, the loop stays scalar.
template <typename C>
[[gnu::always_inline]] inline C unary_value(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return exp_vec(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return C(1) / std::sqrt(x);
    case UnaryOp::relu: return x > C(0) ? x : C(0);
    case UnaryOp::gelu: return C(0.5) * x * (C(1) + erf_vec(x * C(kSqrt1_2)));
    case UnaryOp::gelu_tanh:
      return C(0.5) * x * (C(1) + std::tanh(C(kSqrt2OverPi) * (x + C(kGeluTanhC) * x * x * x)));
    case UnaryOp::silu: return x / (C(1) + exp_vec(-x));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return C(1) / (C(1) + exp_vec(-x));
    case UnaryOp::abs: return std::abs(x);
    case UnaryOp::sign: return static_cast<C>((x > C(0)) - (x < C(0)));
    case UnaryOp::square: return x * x;
    case UnaryOp::reciprocal: return C(1) / x;
    case UnaryOp::sin: return std::sin(x);
    case UnaryOp::cos: return std::cos(x);
    case UnaryOp::erf: return erf_vec(x);
  }
  return x;
}

// d(op)/dx at x, with y = op(x) available to avoid recomputation.
template <typename C>
[[gnu::always_inline]] inline C unary_derivative(UnaryOp op, C x, C y) {
  switch (op) {
    case UnaryOp::neg: return C(-1);
    case UnaryOp::exp: return y;
    case UnaryOp::log: return C(1) / x;
    case UnaryOp::sqrt: return C(0.5) / y;
    case UnaryOp::rsqrt: return C(-0.5) * y * y * y;
    case UnaryOp::relu: return x > C(0) ? C(1) : C(0);
    case UnaryOp::gelu:
      return C(0.5) * (C(1) + erf_vec(x * C(kSqrt1_2))) + x * C(kInvSqrt2Pi) * exp_vec(C(-0.5) * x * x);
    case UnaryOp::gelu_tanh: {
      C u = C(kSqrt2OverPi) * (x + C(kGeluTanhC) * x * x * x);
      C t = std::tanh(u);
      C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluTanhC) * x * x);
      return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
    }
    case UnaryOp::silu: {
      C s = C(1) / (C(1) + exp_vec(-x));
      return s * (C(1) + x * (C(1) - s));
    }
    case UnaryOp::tanh: return C(1) - y * y;
    case UnaryOp::sigmoid: return y * (C(1) - y);
    case UnaryOp::abs: return static_cast<C>((x > C(0)) - (x < C(0)));
    case UnaryOp::sign: return C(0);
    case UnaryOp::square: return C(2) * x;
    case UnaryOp::reciprocal: return -y * y;
    case UnaryOp::sin: return std::cos(x);
    case UnaryOp::cos: return -std::sin(x);
    case UnaryOp::erf: return C(2) * C(0.56418958354775628695) * exp_vec(-x * x);
  }
  return C(0);
}

template <typename T, UnaryOp OP>
void unary_loop(const StridedLayout<2>& L) {
  using C = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, double>;
  for_each_row<2>(L, [](char* const* p, const int64_t* st, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = cast_value<T>(unary_value<C>(OP, cast_value<C>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i * st[0]] = cast_value<T>(unary_value<C>(OP, cast_value<C>(a[i * st[1]])));
    }
  });
}

template <typename T>
void unary_dispatch(UnaryOp op, const StridedLayout<2>& L) {
  // Compile-time op so each loop is specialised (and vectorisable where libm allows).
  switch (op) {
#define QK_UNARY_CASE(name) \
  case UnaryOp::name: unary_loop<T, UnaryOp::name>(L); return;
    QK_UNARY_CASE(neg) QK_UNARY_CASE(exp) QK_UNARY_CASE(log) QK_UNARY_CASE(sqrt)
    QK_UNARY_CASE(rsqrt) QK_UNARY_CASE(relu) QK_UNARY_CASE(gelu) QK_UNARY_CASE(gelu_tanh)
    QK_UNARY_CASE(silu) QK_UNARY_CASE(tanh) QK_UNARY_CASE(sigmoid) QK_UNARY_CASE(abs)
    QK_UNARY_CASE(sign) QK_UNARY_CASE(square) QK_UNARY_CASE(reciprocal) QK_UNARY_CASE(sin)
    QK_UNARY_CASE(cos) QK_UNARY_CASE(erf)
#undef QK_UNARY_CASE
  }
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  auto L = make_layout<3>(out.shape(), {out, a, b});
  if (is_comparison(op)) {
    dispatch_all(a.dtype(), binary_op_name(op), [&](auto tag) { binary_compare<decltype(tag)>(op, L); });
  } else {
    dispatch_numeric(a.dtype(), binary_op_name(op), [&](auto tag) { binary_arith<decltype(tag)>(op, L); });
  }
}

void unary(UnaryOp op, const Tensor& out, const Tensor& a) {
  auto L = make_layout<2>(out.shape(), {out, a});
  dispatch_numeric(a.dtype(), unary_op_name(op), [&](auto tag) { unary_dispatch<decltype(tag)>(op, L); });
}

namespace {
template <typename T, UnaryOp OP>
void unary_backward_loop(const StridedLayout<4>& L) {
  using C = compute_t<T>;
  for_each_row<4>(L, [](char* const* p, const int64_t* st, int64_t n) {
    T* d = reinterpret_cast<T*>(p[0]);
    const T* g = reinterpret_cast<const T*>(p[1]);
    const T* xp = reinterpret_cast<const T*>(p[2]);
    const T* yp = reinterpret_cast<const T*>(p[3]);
    if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {  // vectorisable
      for (int64_t i = 0; i < n; ++i)
        d[i] = cast_value<T>(cast_value<C>(g[i]) *
                             unary_derivative<C>(OP, cast_value<C>(xp[i]), cast_value<C>(yp[i])));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      C xv = cast_value<C>(xp[i * st[2]]), yv = cast_value<C>(yp[i * st[3]]);
      d[i * st[0]] = cast_value<T>(cast_value<C>(g[i * st[1]]) * unary_derivative<C>(OP, xv, yv));
    }
  });
}
}  // namespace

void unary_backward(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& x,
                    const Tensor& y) {
  // x or y may be undefined when the op's derivative does not need it; use
  // whichever is given in both slots then (the derivative ignores the other).
  const Tensor& xs = x.defined() ? x : y;
  const Tensor& ys = y.defined() ? y : x;
  auto L = make_layout<4>(dx.shape(), {dx, grad, xs, ys});
  dispatch_floating(dx.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    // Compile-time op, as in unary(): no switch inside the loop.
    switch (op) {
#define QK_UNARY_BWD_CASE(name) \
  case UnaryOp::name: unary_backward_loop<T, UnaryOp::name>(L); return;
      QK_UNARY_BWD_CASE(neg) QK_UNARY_BWD_CASE(exp) QK_UNARY_BWD_CASE(log) QK_UNARY_BWD_CASE(sqrt)
      QK_UNARY_BWD_CASE(rsqrt) QK_UNARY_BWD_CASE(relu) QK_UNARY_BWD_CASE(gelu)
      QK_UNARY_BWD_CASE(gelu_tanh) QK_UNARY_BWD_CASE(silu) QK_UNARY_BWD_CASE(tanh)
      QK_UNARY_BWD_CASE(sigmoid) QK_UNARY_BWD_CASE(abs) QK_UNARY_BWD_CASE(sign)
      QK_UNARY_BWD_CASE(square) QK_UNARY_BWD_CASE(reciprocal) QK_UNARY_BWD_CASE(sin)
      QK_UNARY_BWD_CASE(cos) QK_UNARY_BWD_CASE(erf)
#undef QK_UNARY_BWD_CASE
    }
  });
}

void clamp(const Tensor& out, const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  auto L = make_layout<2>(out.shape(), {out, a});
  dispatch_numeric(a.dtype(), "clamp", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C l = lo ? static_cast<C>(*lo) : C(0), h = hi ? static_cast<C>(*hi) : C(0);
    const bool has_l = lo.has_value(), has_h = hi.has_value();
    for_each_row<2>(L, [=](char* const* p, const int64_t* st, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      for (int64_t i = 0; i < n; ++i) {
        C v = cast_value<C>(x[i * st[1]]);
        if (has_l && v < l) v = l;
        if (has_h && v > h) v = h;
        o[i * st[0]] = cast_value<T>(v);
      }
    });
  });
}

void clamp_backward(const Tensor& dx, const Tensor& grad, const Tensor& x,
                    std::optional<double> lo, std::optional<double> hi) {
  auto L = make_layout<3>(dx.shape(), {dx, grad, x});
  dispatch_floating(dx.dtype(), "clamp_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
    for_each_row<3>(L, [=](char* const* p, const int64_t* st, int64_t n) {
      T* d = reinterpret_cast<T*>(p[0]);
      const T* g = reinterpret_cast<const T*>(p[1]);
      const T* xv = reinterpret_cast<const T*>(p[2]);
      for (int64_t i = 0; i < n; ++i) {
        double v = cast_value<double>(xv[i * st[2]]);
        d[i * st[0]] = (v >= l && v <= h) ? g[i * st[1]] : cast_value<T>(C(0));
      }
    });
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto L = make_layout<4>(out.shape(), {out, cond, a, b});
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    for_each_row<4>(L, [](char* const* p, const int64_t* st, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = c[i * st[1]] ? x[i * st[2]] : y[i * st[3]];
    });
  });
}

void add_inplace(const Tensor& self, const Tensor& other, double alpha) {
  auto L = make_layout<2>(self.shape(), {self, other});
  dispatch_numeric(self.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C al = static_cast<C>(alpha);
    for_each_row<2>(L, [al](char* const* p, const int64_t* st, int64_t n) {
      T* s = reinterpret_cast<T*>(p[0]);
      const T* o = reinterpret_cast<const T*>(p[1]);
      if (st[0] == 1 && st[1] == 1) {
        for (int64_t i = 0; i < n; ++i) s[i] = cast_value<T>(cast_value<C>(s[i]) + al * cast_value<C>(o[i]));
      } else {
        for (int64_t i = 0; i < n; ++i)
          s[i * st[0]] = cast_value<T>(cast_value<C>(s[i * st[0]]) + al * cast_value<C>(o[i * st[1]]));
      }
    });
  });
}

}  // namespace qk::cpu

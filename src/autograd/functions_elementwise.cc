// Differentiable elementwise functions.
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

// ---- binary ----

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = ops::add(a, b);
  Shape sa = a.shape(), sb = b.shape();
  record("AddBackward", {a, b}, {out}, [sa, sb](const V& g) -> V {
    return {ops::sum_to(g[0], sa), ops::sum_to(g[0], sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = ops::sub(a, b);
  Shape sa = a.shape(), sb = b.shape();
  record("SubBackward", {a, b}, {out}, [sa, sb](const V& g) -> V {
    return {ops::sum_to(g[0], sa), ops::sum_to(ops::unary(UnaryOp::neg, g[0]), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::mul(a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  record("MulBackward", {a, b}, {out}, [a, b, ga, gb](const V& g) -> V {
    // da = g * b, db = g * a (summed over broadcast dims)
    return {ga ? ops::sum_to(ops::mul(g[0], b), a.shape()) : Tensor(),
            gb ? ops::sum_to(ops::mul(g[0], a), b.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = ops::div(a, b);
  bool gb = b.requires_grad();
  // The saved output is detached: `out` itself would hold its own grad_fn,
  // a cycle that leaks the graph when no backward runs.
  record("DivBackward", {a, b}, {out}, [a, b, y = out.detach(), gb](const V& g) -> V {
    Tensor da = ops::sum_to(ops::div(g[0], b), a.shape());
    // d(a/b)/db = -a/b^2 = -out/b
    Tensor db = gb ? ops::sum_to(ops::unary(UnaryOp::neg, ops::div(ops::mul(g[0], y), b)), b.shape())
                   : Tensor();
    return {da, db};
  });
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(BinaryOp::pow, a, b);
  bool gb = b.requires_grad();
  record("PowBackward", {a, b}, {out}, [a, b, y = out.detach(), gb](const V& g) -> V {
    // d/da = b * a^(b-1), d/db = out * log(a)
    Tensor bm1 = ops::binary_scalar(BinaryOp::sub, b, 1.0);
    Tensor da = ops::sum_to(ops::mul(g[0], ops::mul(b, ops::binary(BinaryOp::pow, a, bm1))), a.shape());
    Tensor db = gb ? ops::sum_to(ops::mul(g[0], ops::mul(y, ops::unary(UnaryOp::log, a))), b.shape())
                   : Tensor();
    return {da, db};
  });
  return out;
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = ops::binary_scalar(BinaryOp::pow, a, e);
  record("PowScalarBackward", {a}, {out}, [a, e](const V& g) -> V {
    if (e == 0.0) return {zeros_like(a)};
    Tensor d = ops::binary_scalar(BinaryOp::mul, ops::binary_scalar(BinaryOp::pow, a, e - 1.0), e);
    return {ops::mul(g[0], d)};
  });
  return out;
}

namespace {
// max/min: the gradient goes to the selected operand (split evenly on ties, as PyTorch).
Tensor max_min(bool is_max, const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(is_max ? BinaryOp::maximum : BinaryOp::minimum, a, b);
  record(is_max ? "MaximumBackward" : "MinimumBackward", {a, b}, {out}, [a, b, is_max](const V& g) -> V {
    Tensor a_wins = ops::binary(is_max ? BinaryOp::gt : BinaryOp::lt, a, b);
    Tensor tie = ops::binary(BinaryOp::eq, a, b);
    Tensor zero = zeros({}, TensorOptions().dtype(g[0].dtype()).device(g[0].device()));
    Tensor half_g = ops::binary_scalar(BinaryOp::mul, g[0], 0.5);
    Tensor ga = ops::where(a_wins, g[0], ops::where(tie, half_g, zero));
    Tensor gb = ops::where(a_wins, zero, ops::where(tie, half_g, g[0]));
    return {ops::sum_to(ga, a.shape()), ops::sum_to(gb, b.shape())};
  });
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(true, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(false, a, b); }

Tensor add(const Tensor& a, double b) {
  Tensor out = ops::binary_scalar(BinaryOp::add, a, b);
  record("AddScalarBackward", {a}, {out}, [](const V& g) -> V { return {g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = ops::binary_scalar(BinaryOp::mul, a, b);
  record("MulScalarBackward", {a}, {out},
         [b](const V& g) -> V { return {ops::binary_scalar(BinaryOp::mul, g[0], b)}; });
  return out;
}

// ---- unary ----

namespace {
// `keep_x` / `keep_y`: which of input and output the derivative needs.
Tensor unary_fn(UnaryOp op, const char* name, const Tensor& a, bool keep_x, bool keep_y) {
  Tensor out = ops::unary(op, a);
  if (autograd::needs_grad({a})) {
    Tensor x = keep_x ? a : Tensor();
    Tensor y = keep_y ? out.detach() : Tensor();
    record(name, {a}, {out}, [op, x, y](const V& g) -> V {
      return {ops::unary_backward(op, g[0], x, y)};
    });
  }
  return out;
}
}  // namespace

Tensor neg(const Tensor& a) {
  Tensor out = ops::unary(UnaryOp::neg, a);
  record("NegBackward", {a}, {out}, [](const V& g) -> V { return {ops::unary(UnaryOp::neg, g[0])}; });
  return out;
}
Tensor exp(const Tensor& a) { return unary_fn(UnaryOp::exp, "ExpBackward", a, false, true); }
Tensor log(const Tensor& a) { return unary_fn(UnaryOp::log, "LogBackward", a, true, false); }
Tensor sqrt(const Tensor& a) { return unary_fn(UnaryOp::sqrt, "SqrtBackward", a, false, true); }
Tensor rsqrt(const Tensor& a) { return unary_fn(UnaryOp::rsqrt, "RsqrtBackward", a, false, true); }
Tensor square(const Tensor& a) { return unary_fn(UnaryOp::square, "SquareBackward", a, true, false); }
Tensor abs(const Tensor& a) { return unary_fn(UnaryOp::abs, "AbsBackward", a, true, false); }
// Keeps the output, not the input (as PyTorch): the output is usually kept
// anyway by the next layer, so the input (a batch-norm or sum output) can be
// freed after the forward. The kernel's derivative test x > 0 then reads y,
// which is > 0 exactly where x is.
Tensor relu(const Tensor& a) { return unary_fn(UnaryOp::relu, "ReluBackward", a, false, true); }
Tensor silu(const Tensor& a) { return unary_fn(UnaryOp::silu, "SiluBackward", a, true, false); }
Tensor tanh(const Tensor& a) { return unary_fn(UnaryOp::tanh, "TanhBackward", a, false, true); }
Tensor sigmoid(const Tensor& a) { return unary_fn(UnaryOp::sigmoid, "SigmoidBackward", a, false, true); }

Tensor gelu(const Tensor& a, std::string_view approximate) {
  QK_CHECK(approximate == "none" || approximate == "tanh",
           "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return approximate == "none" ? unary_fn(UnaryOp::gelu, "GeluBackward", a, true, false)
                               : unary_fn(UnaryOp::gelu_tanh, "GeluTanhBackward", a, true, false);
}

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  Tensor out = ops::clamp(a, lo, hi);
  record("ClampBackward", {a}, {out},
         [a, lo, hi](const V& g) -> V { return {ops::clamp_backward(g[0], a, lo, hi)}; });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  Shape sa = a.shape(), sb = b.shape();
  record("WhereBackward", {a, b}, {out}, [cond, sa, sb](const V& g) -> V {
    Tensor zero = zeros({}, TensorOptions().dtype(g[0].dtype()).device(g[0].device()));
    return {ops::sum_to(ops::where(cond, g[0], zero), sa), ops::sum_to(ops::where(cond, zero, g[0]), sb)};
  });
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  Tensor out = ops::masked_fill(a, mask, value);
  Shape sa = a.shape();
  record("MaskedFillBackward", {a}, {out}, [mask, sa](const V& g) -> V {
    Tensor zero = zeros({}, TensorOptions().dtype(g[0].dtype()).device(g[0].device()));
    return {ops::sum_to(ops::where(mask, zero, g[0]), sa)};
  });
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::ge, a, b); }

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) {
  return div(full(b.shape(), a, TensorOptions().dtype(b.dtype()).device(b.device())), b);
}
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace qk

// Differentiable reductions.
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

namespace {
// Shape of a reduction's result with keepdim=true (to broadcast the gradient back).
Shape keep_shape(const Tensor& a, const Shape& dims) {
  Shape s = a.shape();
  if (dims.empty()) {
    for (auto& d : s) d = 1;
    return s;
  }
  for (int64_t d : dims) s[a.wrap_dim(d, "reduce")] = 1;
  return s;
}
int64_t reduced_count(const Tensor& a, const Shape& dims) {
  if (dims.empty()) return a.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= a.shape()[a.wrap_dim(d, "reduce")];
  return n;
}
}  // namespace

Tensor sum(const Tensor& a_in, const Shape& dims, bool keepdim) {
  const Tensor a = autocast::to_f32(a_in);
  Tensor out = ops::sum(a, dims, keepdim);
  Shape ks = keep_shape(a, dims), in = a.shape();
  record("SumBackward", {a}, {out}, [ks, in](const V& g) -> V {
    return {ops::contiguous(ops::expand(ops::reshape(g[0], ks), in))};
  });
  return out;
}

Tensor mean(const Tensor& a_in, const Shape& dims, bool keepdim) {
  const Tensor a = autocast::to_f32(a_in);
  Tensor out = ops::mean(a, dims, keepdim);
  Shape ks = keep_shape(a, dims), in = a.shape();
  double n = static_cast<double>(reduced_count(a, dims));
  record("MeanBackward", {a}, {out}, [ks, in, n](const V& g) -> V {
    Tensor gs = ops::binary_scalar(BinaryOp::div, ops::reshape(g[0], ks), n);
    return {ops::contiguous(ops::expand(gs, in))};
  });
  return out;
}

Tensor var(const Tensor& a, const Shape& dims, bool unbiased, bool keepdim) {
  Tensor out = ops::var(a, dims, unbiased, keepdim);
  Shape ks = keep_shape(a, dims);
  double n = static_cast<double>(reduced_count(a, dims));
  record("VarBackward", {a}, {out}, [a, dims, ks, n, unbiased](const V& g) -> V {
    // d var / dx = 2 (x - mean) / (n - correction)
    Tensor centered = ops::sub(a, ops::mean(a, dims, true));
    Tensor scale = ops::binary_scalar(BinaryOp::div, ops::reshape(g[0], ks), (unbiased ? n - 1 : n) / 2.0);
    return {ops::mul(centered, scale)};
  });
  return out;
}

namespace {
// amax/amin: the gradient is shared evenly among the elements equal to the extreme.
Tensor extreme(bool is_max, const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor out = is_max ? ops::amax(a, dims, keepdim) : ops::amin(a, dims, keepdim);
  Shape ks = keep_shape(a, dims);
  // The saved output is detached (a cycle through its grad_fn otherwise).
  const char* name = is_max ? "AmaxBackward" : "AminBackward";
  record(name, {a}, {out}, [a, y = out.detach(), ks, dims](const V& g) -> V {
    Tensor hit = ops::cast(ops::binary(BinaryOp::eq, a, ops::reshape(y, ks)), a.dtype());
    Tensor count = ops::sum(hit, dims, true);
    return {ops::mul(hit, ops::div(ops::reshape(g[0], ks), count))};
  });
  return out;
}

std::pair<Tensor, Tensor> extreme_dim(bool is_max, const Tensor& a, int64_t dim, bool keepdim) {
  auto [vals, idx] = is_max ? ops::max_dim(a, dim, keepdim) : ops::min_dim(a, dim, keepdim);
  Shape in = a.shape();
  int64_t d = a.dim() == 0 ? 0 : a.wrap_dim(dim, "max");
  record(is_max ? "MaxBackward" : "MinBackward", {a}, {vals}, [idx, in, d, keepdim](const V& g) -> V {
    // Scatter each gradient to the position of its selected element.
    Tensor gk = keepdim || in.empty() ? g[0] : ops::unsqueeze(g[0], d);
    Tensor ik = keepdim || in.empty() ? idx : ops::unsqueeze(idx, d);
    Tensor dx = zeros(in, TensorOptions().dtype(g[0].dtype()).device(g[0].device()));
    if (in.empty()) return {ops::reshape(g[0], in)};
    Shape ps(in.size(), 1);
    ps[d] = in[d];
    Tensor positions = ops::reshape(arange(in[d], TensorOptions().dtype(DType::i64).device(g[0].device())), ps);
    Tensor hit = ops::binary(BinaryOp::eq, positions, ik);
    return {ops::where(hit, gk, dx)};
  });
  return {vals, idx};
}
}  // namespace

Tensor amax(const Tensor& a, const Shape& dims, bool keepdim) { return extreme(true, a, dims, keepdim); }
Tensor amin(const Tensor& a, const Shape& dims, bool keepdim) { return extreme(false, a, dims, keepdim); }
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(true, a, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(false, a, dim, keepdim);
}
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) { return ops::argmax(a, dim, keepdim); }
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) { return ops::argmin(a, dim, keepdim); }

}  // namespace qk

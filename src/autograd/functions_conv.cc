// Differentiable convolution and pooling; the backward kernels live beside
// the forward ones in the tensor layer (qk/tensor/ops/conv.h).
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/conv.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

namespace {
// The pooling backward kernels read only x's shape and dtype. Saving a
// one-element broadcast view instead of x itself lets x's memory go as soon
// as nothing else holds it (lower peak memory in training).
Tensor shape_of(const Tensor& x) {
  return ops::expand(zeros({1, 1, 1, 1}, TensorOptions(x.dtype()).device(x.device())), x.shape());
}
// dx in x's memory format (the stand-in above has none): a channels-last
// activation's gradient stays channels last for the ops before it.
Tensor in_format(const Tensor& dx, ops::MemoryFormat f) { return ops::contiguous(dx, f); }
}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ops::Conv2dParams& p) {
  const Tensor x = autocast::to_low(x_in);
  const Tensor w = autocast::to_low(w_in);
  const Tensor b = autocast::to_low(b_in);
  // x [N,C,H,W], w [O,C/groups,kh,kw], b [O] -> y [N,O,Ho,Wo]
  Tensor y = ops::conv2d(x, w, b, p);
  bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  record("Conv2dBackward", inputs, {y}, [x, w, p, gx, gw, gb, has_b = b.defined()](const V& g) -> V {
    auto [dx, dw, db] = ops::conv2d_backward(g[0], x, w, p, gx, gw, gb);
    if (has_b) return {dx, dw, db};
    return {dx, dw};
  });
  return y;
}

Tensor max_pool2d(const Tensor& x, const ops::Pool2dParams& p) {
  // x [N,C,H,W] -> y [N,C,Ho,Wo]; indices pick the input of each output.
  auto [y, indices] = ops::max_pool2d(x, p);
  if (autograd::needs_grad({x})) {
    record("MaxPool2dBackward", {x}, {y},
           [xs = shape_of(x), f = ops::suggest_memory_format(x), indices](const V& g) -> V {
      return {in_format(ops::max_pool2d_backward(g[0], xs, indices), f)};
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p) {
  Tensor y = ops::avg_pool2d(x, p);
  if (autograd::needs_grad({x})) {
    record("AvgPool2dBackward", {x}, {y}, [xs = shape_of(x), f = ops::suggest_memory_format(x), p](const V& g) -> V {
      return {in_format(ops::avg_pool2d_backward(g[0], xs, p), f)};
    });
  }
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size) {
  Tensor y = ops::adaptive_avg_pool2d(x, out_size);
  if (autograd::needs_grad({x})) {
    record("AdaptiveAvgPool2dBackward", {x}, {y},
           [xs = shape_of(x), f = ops::suggest_memory_format(x)](const V& g) -> V {
      return {in_format(ops::adaptive_avg_pool2d_backward(g[0], xs), f)};
    });
  }
  return y;
}

}  // namespace qk

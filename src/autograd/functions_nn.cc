// Differentiable softmax, losses, dropout and embedding.
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

// ---- softmax: the backward needs only the output y ----

Tensor softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast::to_f32(x_in);
  Tensor out = ops::softmax(x, dim);
  if (autograd::needs_grad({x})) {
    Tensor y = out.detach();
    record("SoftmaxBackward", {x}, {out},
           [y, dim](const V& g) -> V { return {ops::softmax_backward(g[0], y, dim)}; });
  }
  return out;
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast::to_f32(x_in);
  Tensor out = ops::log_softmax(x, dim);
  if (autograd::needs_grad({x})) {
    Tensor y = out.detach();
    record("LogSoftmaxBackward", {x}, {out},
           [y, dim](const V& g) -> V { return {ops::log_softmax_backward(g[0], y, dim)}; });
  }
  return out;
}

// ---- losses ----

// logits [N, C, ...] -> loss; the gradient flows to the logits only.
Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, ops::Reduction reduction) {
  const Tensor logits = autocast::to_f32(logits_in);
  auto r = ops::cross_entropy(logits, target, ignore_index, label_smoothing, reduction);
  if (autograd::needs_grad({logits})) {
    Tensor lp = r.log_probs, t = target.detach();
    record("CrossEntropyBackward", {logits}, {r.loss},
           [lp, t, ignore_index, label_smoothing, reduction](const V& g) -> V {
             return {ops::cross_entropy_backward(g[0], lp, t, ignore_index, label_smoothing,
                                                 reduction)};
           });
  }
  return r.loss;
}

// (input - target)^2, reduced; input and target have one shape.
Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, ops::Reduction reduction) {
  const Tensor input = autocast::to_f32(input_in);
  const Tensor target = autocast::to_f32(target_in);
  QK_CHECK(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()),
           " and target ", shape_str(target.shape()), " must have the same shape");
  Tensor diff = ops::sub(input, target);
  Tensor sq = ops::unary(UnaryOp::square, diff);
  Tensor out = reduction == ops::Reduction::none  ? sq
               : reduction == ops::Reduction::sum ? ops::sum(sq)
                                                  : ops::mean(sq);
  if (autograd::needs_grad({input, target})) {
    const bool gt = target.requires_grad();
    const double n = static_cast<double>(std::max<int64_t>(1, input.numel()));
    record("MseLossBackward", {input, target}, {out}, [diff, reduction, n, gt](const V& g) -> V {
      // d/dinput = 2 (input - target) * g [/ numel for mean]; d/dtarget = -d/dinput
      const double k = reduction == ops::Reduction::mean ? 2.0 / n : 2.0;
      Tensor dinput = ops::mul(ops::binary_scalar(BinaryOp::mul, diff, k), g[0]);
      return {dinput, gt ? ops::unary(UnaryOp::neg, dinput) : Tensor()};
    });
  }
  return out;
}

// ---- dropout and embedding ----

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0) return x;
  auto [out, mask] = ops::dropout(x, p, gen);
  if (autograd::needs_grad({x})) {
    Tensor m = mask;
    record("DropoutBackward", {x}, {out}, [m](const V& g) -> V { return {ops::mul(g[0], m)}; });
  }
  return out;
}

// weight [V, D], indices any shape -> [..., D]; padding_idx -1 means none.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  QK_CHECK(padding_idx >= -1 && (weight.dim() != 2 || padding_idx < weight.size(0)),
           "embedding: padding_idx ", padding_idx, " out of range for weight ",
           shape_str(weight.shape()), " (use -1 for none)");
  Tensor out = ops::embedding(weight, indices);
  if (autograd::needs_grad({weight})) {
    Tensor idx = indices.detach();
    const int64_t num = weight.size(0);
    record("EmbeddingBackward", {weight}, {out}, [idx, num, padding_idx](const V& g) -> V {
      return {ops::embedding_backward(g[0], idx, num, padding_idx)};
    });
  }
  return out;
}

}  // namespace qk

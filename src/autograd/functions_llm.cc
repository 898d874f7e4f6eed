// Differentiable rotary embedding, SwiGLU and linear + cross entropy: each a
// fused raw op forward, and a fused raw op (or a saved result) backward.
#include <memory>

#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/llm_ops.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/llm.h"
#include "qk/tensor/ops/view.h"

namespace qk {

using autograd::record;
using V = std::vector<Tensor>;

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  QK_CHECK(!cos.requires_grad() && !sin.requires_grad(),
           "rotary_embedding: cos and sin are constants here and get no gradient, but one "
           "requires grad; detach() them");
  Tensor y = ops::rotary_embedding(x, cos, sin);
  record("RotaryEmbeddingBackward", {x}, {y}, [cos, sin](const V& g) -> V {
    return {ops::rotary_embedding_backward(g[0], cos, sin)};
  });
  return y;
}

Tensor swiglu(const Tensor& x) {
  Tensor y = ops::swiglu(x);
  record("SwigluBackward", {x}, {y},
         [x](const V& g) -> V { return {ops::swiglu_backward(g[0], x)}; });
  return y;
}

Tensor linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in, const Tensor& target,
                            const Tensor& token_weight, int64_t ignore_index) {
  QK_CHECK(!token_weight.defined() || !token_weight.requires_grad(),
           "linear_cross_entropy: token_weight is a constant here and gets no gradient, but it "
           "requires grad; detach() it");
  // Under a bf16 autocast the GEMMs run in bf16 (as linear's would) and the
  // softmax in f32 (as cross_entropy's would); the kernel does both.
  const bool low = autocast::is_enabled() && autocast::low_dtype() == DType::bf16;
  // f16 has no kernel of its own: it runs in f32 (a differentiable cast, so
  // the gradients come back in f16), as the unfused logits would.
  auto f16_up = [](const Tensor& t) { return t.defined() && t.dtype() == DType::f16 ? t.to(DType::f32) : t; };
  const Tensor hidden = low ? autocast::to_low(hidden_in) : f16_up(autocast::to_f32(hidden_in));
  const Tensor weight = low ? autocast::to_low(weight_in) : f16_up(autocast::to_f32(weight_in));
  ops::LinearCrossEntropyOptions o;
  o.ignore_index = ignore_index;
  const bool any = autograd::needs_grad({hidden, weight});
  o.grad_hidden = any && hidden.requires_grad();
  o.grad_weight = any && weight.requires_grad();
  auto r = ops::linear_cross_entropy(hidden, weight, target, token_weight, o);
  if (!any) return r.loss;
  // The gradients are d loss / d input already: backward scales them by the
  // incoming gradient of the scalar loss (1 when the loss ends the graph).
  // They are handed over, not copied (the engine adopts a gradient nobody
  // else holds as the leaf's .grad instead of cloning it: 154 MB for
  // GPT-2's output layer); a second backward (retain_graph) recomputes them.
  struct Saved {
    Tensor dh, dw, hidden, weight, target, token_weight;
    ops::LinearCrossEntropyOptions o;
  };
  auto saved = std::make_shared<Saved>(
      Saved{r.grad_hidden, r.grad_weight, hidden, weight, target, token_weight, o});
  r.grad_hidden = Tensor();
  r.grad_weight = Tensor();
  record("LinearCrossEntropyBackward", {hidden, weight}, {r.loss}, [saved](const V& g) -> V {
    Tensor dh = std::move(saved->dh), dw = std::move(saved->dw);
    if (!dh.defined() && !dw.defined()) {
      auto again = ops::linear_cross_entropy(saved->hidden, saved->weight, saved->target,
                                             saved->token_weight, saved->o);
      dh = again.grad_hidden;
      dw = again.grad_weight;
    }
    if (!g[0].device().is_cpu()) {
      // On a device the incoming scale stays there (reading it would stall
      // the host): the same product, the scale rounded to each gradient's
      // dtype as binary_scalar rounds it.
      const Tensor s = ops::reshape(g[0], {});
      auto scaled = [&s](const Tensor& t) {
        return !t.defined() ? t : ops::binary(BinaryOp::mul, t, ops::cast(s, t.dtype()));
      };
      return {scaled(dh), scaled(dw)};
    }
    const double s = g[0].item<double>();
    auto scaled = [s](const Tensor& t) {
      return !t.defined() || s == 1.0 ? t : ops::binary_scalar(BinaryOp::mul, t, s);
    };
    return {scaled(dh), scaled(dw)};
  });
  return r.loss;
}

}  // namespace qk

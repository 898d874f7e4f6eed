// grouped_linear: every local expert's projection in one grouped GEMM
// (qk::ops::grouped_mm), with its backward as two more grouped GEMMs.
#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/grouped_linalg.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

namespace {

std::vector<Tensor> to_low(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(autocast::to_low(t));
  return out;
}

}  // namespace

Tensor grouped_linear(const Tensor& x_in, const std::vector<int64_t>& rows, const std::vector<Tensor>& weights_in,
                      const std::vector<Tensor>& biases_in) {
  QK_CHECK(x_in.dim() == 2, "grouped_linear: expected x [M, K], got ", shape_str(x_in.shape()));
  // Under autocast the products run in the low dtype, as linear's do.
  const Tensor x = autocast::to_low(x_in);
  const std::vector<Tensor> weights = to_low(weights_in), biases = to_low(biases_in);
  Tensor y = ops::grouped_mm(x, rows, weights, /*trans_b=*/true, biases);

  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  if (!autograd::needs_grad(inputs)) return y;
  bool need_w = false;
  for (const Tensor& w : weights) need_w = need_w || w.requires_grad();
  const bool need_x = x.requires_grad(), has_bias = !biases.empty();
  const Tensor saved_x = need_w ? x.detach() : Tensor();
  std::vector<Tensor> saved_w;
  if (need_x)
    for (const Tensor& w : weights) saved_w.push_back(w.detach());
  autograd::record("GroupedLinearBackward", inputs, {y},
                   [saved_x, saved_w, rows, need_x, need_w, has_bias](const std::vector<Tensor>& g) {
                     const size_t groups = rows.size();
                     std::vector<Tensor> grads(1 + groups * (has_bias ? 2 : 1));
                     // dx_g = dy_g . W_g; dW_g = dy_g^T . x_g; db_g = sum of dy_g's rows.
                     if (need_x) grads[0] = ops::grouped_mm(g[0], rows, saved_w, /*trans_b=*/false);
                     if (need_w) {
                       std::vector<Tensor> dw = ops::grouped_mm_tn(g[0], saved_x, rows);
                       for (size_t i = 0; i < groups; ++i) grads[1 + i] = std::move(dw[i]);
                     }
                     if (has_bias) {
                       int64_t at = 0;
                       for (size_t i = 0; i < groups; ++i) {
                         grads[1 + groups + i] = ops::sum(ops::narrow(g[0], 0, at, rows[i]), {0});
                         at += rows[i];
                       }
                     }
                     return grads;
                   });
  return y;
}

}  // namespace qk::transformer

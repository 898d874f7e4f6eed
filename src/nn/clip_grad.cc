#include "qk/nn/clip_grad.h"

#include <cmath>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/tensor/ops/view.h"

namespace qk::nn::utils {

namespace {
// The p-norm of one gradient, computed in f32 (f64 for f64 gradients).
double grad_norm(const Tensor& grad, double p) {
  Tensor g = is_reduced_float(grad.dtype()) ? ops::cast(grad, DType::f32) : grad;
  Tensor a = ops::unary(UnaryOp::abs, g);
  if (std::isinf(p)) return a.numel() == 0 ? 0.0 : ops::amax(a).item_double();
  if (p == 2.0) return std::sqrt(ops::sum(ops::unary(UnaryOp::square, g)).item_double());
  if (p == 1.0) return ops::sum(a).item_double();
  return std::pow(ops::sum(ops::binary_scalar(BinaryOp::pow, a, p)).item_double(), 1.0 / p);
}
}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  QK_CHECK(norm_type > 0, "clip_grad_norm_: expected norm_type > 0 (or kInfNorm), got ", norm_type);
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // Total norm = the norm of the per-gradient norms, as PyTorch computes it.
  double total = 0.0;
  for (const Tensor& g : grads) {
    double n = grad_norm(g, norm_type);
    if (std::isinf(norm_type)) total = std::isnan(n) || std::isnan(total) ? NAN : std::max(total, n);
    else total += std::pow(n, norm_type);
  }
  if (!std::isinf(norm_type)) total = std::pow(total, 1.0 / norm_type);
  QK_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ",
           norm_type, " of the gradients is ", total,
           ", so they cannot be clipped; pass error_if_nonfinite=false to clip anyway");
  double coef = max_norm / (total + 1e-6);
  // !(coef >= 1) is also true for nan: nan gradients propagate, as PyTorch.
  if (!(coef >= 1.0))
    for (const Tensor& g : grads) {
      ops::mul_(g, coef);
      g.bump_version();
    }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  QK_CHECK(clip_value >= 0, "clip_grad_value_: expected clip_value >= 0, got ", clip_value);
  NoGradGuard ng;
  for (const Tensor& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    const Tensor& g = p.grad();
    ops::copy_(g, ops::clamp(g, -clip_value, clip_value));
    g.bump_version();
  }
}

}  // namespace qk::nn::utils

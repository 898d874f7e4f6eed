// LayerNorm and RMSNorm over the trailing `normalized_shape` dims.
//
//   qk::nn::LayerNorm ln(qk::nn::LayerNormOptions({768}).eps(1e-5));
//   qk::nn::RMSNorm rms(qk::nn::RMSNormOptions({768}));   // y = x / rms(x) * weight
#pragma once

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct LayerNormOptions {
  /* implicit */ LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  QK_ARG(Shape, normalized_shape);
  QK_ARG(double, eps) = 1e-5;
  QK_ARG(bool, elementwise_affine) = true;
  QK_ARG(bool, bias) = true;
};

// weight ones and bias zeros of normalized_shape (when elementwise_affine).
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  LayerNormOptions options;
  Tensor weight, bias;
};
QK_MODULE(LayerNorm);

struct RMSNormOptions {
  /* implicit */ RMSNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  QK_ARG(Shape, normalized_shape);
  QK_ARG(double, eps) = 1e-6;
  QK_ARG(bool, elementwise_affine) = true;
};

class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  RMSNormOptions options;
  Tensor weight;
};
QK_MODULE(RMSNorm);

}  // namespace qk::nn

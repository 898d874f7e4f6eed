// Activations and Dropout as modules.
//
//   qk::nn::Sequential mlp(qk::nn::Linear(4, 8), qk::nn::GELU(), qk::nn::Dropout(0.1),
//                          qk::nn::Linear(8, 1));
//   qk::nn::GELU g(qk::nn::GELUOptions().approximate("tanh"));
#pragma once

#include <string>

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

class ReLUImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
};
QK_MODULE(ReLU);

struct GELUOptions {
  GELUOptions() = default;
  // "none" (exact, erf) or "tanh".
  QK_ARG(std::string, approximate) = "none";
};

class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  GELUOptions options;
};
QK_MODULE(GELU);

class SiLUImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
};
QK_MODULE(SiLU);

class TanhImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
};
QK_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
};
QK_MODULE(Sigmoid);

struct DropoutOptions {
  /* implicit */ DropoutOptions(double p = 0.5) : p_(p) {}
  QK_ARG(double, p);
};

// Zeroes each element with probability p in training (scaling the rest by
// 1/(1-p)); the identity in eval mode.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}
  explicit DropoutImpl(const DropoutOptions& options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  DropoutOptions options;
};
QK_MODULE(Dropout);

}  // namespace qk::nn

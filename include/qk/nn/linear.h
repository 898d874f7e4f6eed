// Linear (y = x W^T + b), Flatten and Identity.
//
//   qk::nn::Linear fc(qk::nn::LinearOptions(512, 10).bias(false));
//   qk::Tensor y = fc(x);            // x [..., 512] -> y [..., 10]
//   qk::nn::Flatten flat;            // [N, C, H, W] -> [N, C*H*W]
#pragma once

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  QK_ARG(int64_t, in_features);
  QK_ARG(int64_t, out_features);
  QK_ARG(bool, bias) = true;
};

// weight [out, in] ~ kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(in)); bias [out] ~ U(+-1/sqrt(in)):
// PyTorch's defaults.
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const LinearOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  Tensor weight, bias;
};
QK_MODULE(Linear);

struct FlattenOptions {
  FlattenOptions() = default;
  QK_ARG(int64_t, start_dim) = 1;
  QK_ARG(int64_t, end_dim) = -1;
};

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x) { return x.flatten(options.start_dim(), options.end_dim()); }
  void pretty_print(std::ostream& os) const override;
  FlattenOptions options;
};
QK_MODULE(Flatten);

class IdentityImpl : public Module {
 public:
  Tensor forward(const Tensor& x) { return x; }
};
QK_MODULE(Identity);

}  // namespace qk::nn

// Conv2d over NCHW input.
//
//   qk::nn::Conv2d conv(qk::nn::Conv2dOptions(3, 32, 3).padding(1));
//   qk::Tensor y = conv(x);   // [N, 3, H, W] -> [N, 32, H, W]
#pragma once

#include "qk/nn/arg.h"
#include "qk/nn/expanding_array.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  QK_ARG(int64_t, in_channels);
  QK_ARG(int64_t, out_channels);
  QK_ARG(ExpandingArray<2>, kernel_size);
  QK_ARG(ExpandingArray<2>, stride) = 1;
  QK_ARG(ExpandingArray<2>, padding) = 0;
  QK_ARG(ExpandingArray<2>, dilation) = 1;
  QK_ARG(int64_t, groups) = 1;
  QK_ARG(bool, bias) = true;
};

// weight [out, in/groups, kh, kw] and bias [out], initialised as PyTorch's
// (kaiming_uniform(a=sqrt(5)), U(+-1/sqrt(fan_in))).
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  explicit Conv2dImpl(const Conv2dOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  Conv2dOptions options;
  Tensor weight, bias;
};
QK_MODULE(Conv2d);

}  // namespace qk::nn

// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d over NCHW input.
//
//   qk::nn::MaxPool2d pool(2);                                   // kernel 2, stride 2
//   qk::nn::AvgPool2d avg(qk::nn::AvgPool2dOptions(3).stride(1).padding(1));
//   qk::nn::AdaptiveAvgPool2d gap(1);                            // [N, C, H, W] -> [N, C, 1, 1]
#pragma once

#include "qk/nn/arg.h"
#include "qk/nn/expanding_array.h"
#include "qk/nn/module.h"

namespace qk::nn {

// stride defaults to kernel_size, as PyTorch.
struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  QK_ARG(ExpandingArray<2>, kernel_size);
  QK_ARG(ExpandingArray<2>, stride);
  QK_ARG(ExpandingArray<2>, padding) = 0;
  QK_ARG(ExpandingArray<2>, dilation) = 1;
  QK_ARG(bool, ceil_mode) = false;
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size) : options(kernel_size) {}
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  MaxPool2dOptions options;
};
QK_MODULE(MaxPool2d);

struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  QK_ARG(ExpandingArray<2>, kernel_size);
  QK_ARG(ExpandingArray<2>, stride);
  QK_ARG(ExpandingArray<2>, padding) = 0;
  QK_ARG(bool, ceil_mode) = false;
  QK_ARG(bool, count_include_pad) = true;
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size) : options(kernel_size) {}
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AvgPool2dOptions options;
};
QK_MODULE(AvgPool2d);

struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size) : output_size_(output_size) {}
  QK_ARG(ExpandingArray<2>, output_size);
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size) : options(output_size) {}
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AdaptiveAvgPool2dOptions options;
};
QK_MODULE(AdaptiveAvgPool2d);

}  // namespace qk::nn

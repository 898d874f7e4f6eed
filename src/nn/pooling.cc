#include "qk/nn/pooling.h"

#include "qk/autograd/functions.h"

namespace qk::nn {

namespace {
void check_input(const Tensor& x, const char* name) {
  QK_CHECK(x.dim() == 4, name, ": expected input [N, C, H, W], got shape ", shape_str(x.shape()));
}
}  // namespace

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  check_input(x, "MaxPool2d");
  ops::Pool2dParams p;
  p.kernel = *options.kernel_size();
  p.stride = *options.stride();
  p.padding = *options.padding();
  p.dilation = *options.dilation();
  p.ceil_mode = options.ceil_mode();
  return qk::max_pool2d(x, p);
}

void MaxPool2dImpl::pretty_print(std::ostream& os) const {
  os << "MaxPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
     << ", padding=" << options.padding() << ")";
}

Tensor AvgPool2dImpl::forward(const Tensor& x) {
  check_input(x, "AvgPool2d");
  ops::Pool2dParams p;
  p.kernel = *options.kernel_size();
  p.stride = *options.stride();
  p.padding = *options.padding();
  p.ceil_mode = options.ceil_mode();
  p.count_include_pad = options.count_include_pad();
  return qk::avg_pool2d(x, p);
}

void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AvgPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
     << ", padding=" << options.padding() << ")";
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) {
  check_input(x, "AdaptiveAvgPool2d");
  return qk::adaptive_avg_pool2d(x, *options.output_size());
}

void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << options.output_size() << ")";
}

}  // namespace qk::nn

#include "qk/nn/conv.h"

#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"

namespace qk::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : options(o) {
  QK_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0,
           "Conv2d: in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
           ") must be divisible by groups (", o.groups(), ")");
  for (int i = 0; i < 2; ++i) {
    QK_CHECK(o.kernel_size()[i] > 0 && o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0,
             "Conv2d: expected positive kernel_size, stride, dilation and non-negative padding, got kernel_size=",
             o.kernel_size(), " stride=", o.stride(), " dilation=", o.dilation(), " padding=", o.padding());
  }
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(),
                                               o.kernel_size()[0], o.kernel_size()[1]}));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(), "Conv2d: expected input [N, ",
           options.in_channels(), ", H, W], got shape ", shape_str(x.shape()));
  ops::Conv2dParams p;
  p.stride = *options.stride();
  p.padding = *options.padding();
  p.dilation = *options.dilation();
  p.groups = options.groups();
  return qk::conv2d(x, weight, bias, p);
}

void Conv2dImpl::pretty_print(std::ostream& os) const {
  os << "Conv2d(" << options.in_channels() << ", " << options.out_channels()
     << ", kernel_size=" << options.kernel_size() << ", stride=" << options.stride();
  if (!(options.padding() == ExpandingArray<2>(0))) os << ", padding=" << options.padding();
  if (!(options.dilation() == ExpandingArray<2>(1))) os << ", dilation=" << options.dilation();
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

}  // namespace qk::nn

#include "qk/nn/linear.h"

#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"

namespace qk::nn {

LinearImpl::LinearImpl(const LinearOptions& o) : options(o) {
  QK_CHECK(o.in_features() >= 0 && o.out_features() >= 0,
           "Linear: expected non-negative in_features and out_features, got ", o.in_features(),
           " and ", o.out_features());
  weight = register_parameter("weight", empty({o.out_features(), o.in_features()}));
  bias = register_parameter("bias", o.bias() ? empty({o.out_features()}) : Tensor());
  reset_parameters();
}

// PyTorch's Linear.reset_parameters: kaiming_uniform(a=sqrt(5)) gives
// U(+-1/sqrt(fan_in)) for the weight; the bias uses the same bound.
void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = options.in_features() > 0 ? 1.0 / std::sqrt(static_cast<double>(options.in_features())) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() >= 1 && x.size(-1) == options.in_features(), "Linear: expected input [..., ",
           options.in_features(), "], got shape ", shape_str(x.shape()));
  return qk::linear(x, weight, bias);
}

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << (options.bias() ? "true" : "false") << ")";
}

void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

}  // namespace qk::nn

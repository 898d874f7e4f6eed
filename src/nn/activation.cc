#include "qk/nn/activation.h"

#include "qk/autograd/functions.h"

namespace qk::nn {

Tensor ReLUImpl::forward(const Tensor& x) { return relu(x); }
Tensor SiLUImpl::forward(const Tensor& x) { return silu(x); }
Tensor TanhImpl::forward(const Tensor& x) { return tanh(x); }
Tensor SigmoidImpl::forward(const Tensor& x) { return sigmoid(x); }

GELUImpl::GELUImpl(const GELUOptions& o) : options(o) {
  QK_CHECK(o.approximate() == "none" || o.approximate() == "tanh",
           "GELU: approximate must be \"none\" or \"tanh\", got \"", o.approximate(), "\"");
}

Tensor GELUImpl::forward(const Tensor& x) { return gelu(x, options.approximate()); }

void GELUImpl::pretty_print(std::ostream& os) const {
  os << "GELU(approximate='" << options.approximate() << "')";
}

DropoutImpl::DropoutImpl(const DropoutOptions& o) : options(o) {
  QK_CHECK(o.p() >= 0 && o.p() <= 1, "Dropout: probability must be in [0, 1], got ", o.p());
}

Tensor DropoutImpl::forward(const Tensor& x) {
  if (is_training() && options.p() == 1.0) return mul(x, 0.0);  // 1/(1-p) would be inf
  return qk::dropout(x, options.p(), is_training());
}

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << options.p() << ")"; }

}  // namespace qk::nn

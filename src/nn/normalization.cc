#include "qk/nn/normalization.h"

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"

namespace qk::nn {

namespace {
void check_shape(const Shape& s, const char* name) {
  QK_CHECK(!s.empty(), name, ": normalized_shape must have at least one dim");
  for (int64_t d : s) QK_CHECK(d > 0, name, ": expected positive sizes in normalized_shape, got ", shape_str(s));
}
void check_input(const Tensor& x, const Shape& s, const char* name) {
  bool ok = x.dim() >= static_cast<int64_t>(s.size());
  for (size_t i = 0; ok && i < s.size(); ++i) ok = x.size(x.dim() - static_cast<int64_t>(s.size() - i)) == s[i];
  QK_CHECK(ok, name, ": expected input with trailing dims ", shape_str(s), ", got shape ", shape_str(x.shape()));
}
}  // namespace

LayerNormImpl::LayerNormImpl(const LayerNormOptions& o) : options(o) {
  check_shape(o.normalized_shape(), "LayerNorm");
  weight = register_parameter("weight", o.elementwise_affine() ? empty(o.normalized_shape()) : Tensor());
  bias = register_parameter("bias", o.elementwise_affine() && o.bias() ? empty(o.normalized_shape()) : Tensor());
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  check_input(x, options.normalized_shape(), "LayerNorm");
  return qk::layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << shape_str(options.normalized_shape()) << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "true" : "false") << ")";
}

RMSNormImpl::RMSNormImpl(const RMSNormOptions& o) : options(o) {
  check_shape(o.normalized_shape(), "RMSNorm");
  weight = register_parameter("weight", o.elementwise_affine() ? empty(o.normalized_shape()) : Tensor());
  reset_parameters();
}

void RMSNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNormImpl::forward(const Tensor& x) {
  check_input(x, options.normalized_shape(), "RMSNorm");
  return qk::rms_norm(x, options.normalized_shape(), weight, options.eps());
}

void RMSNormImpl::pretty_print(std::ostream& os) const {
  os << "RMSNorm(" << shape_str(options.normalized_shape()) << ", eps=" << options.eps() << ")";
}

}  // namespace qk::nn

#include "qk/nn/fused.h"

#include <cmath>
#include <vector>

#include "qk/autograd/autocast.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/conv.h"

namespace qk::nn {

namespace {

bool fusable(const Conv2dImpl& conv, const BatchNorm2dImpl& bn, const Tensor& x,
             const Tensor& residual) {
  if (bn.is_training() || !bn.options.track_running_stats() || autocast::is_enabled())
    return false;
  // On the CPU: one oneDNN convolution with the batch norm, residual and
  // ReLU as post-ops. Elsewhere conv2d_fused is op by op, and the fold reads
  // the statistics to the host (on a GPU: four waits per layer, 80 per
  // batch-1 ResNet step, most of its time), so the modules run as they are.
  if (!x.defined() || !x.device().is_cpu()) return false;
  if (autograd::needs_grad({x, conv.weight, conv.bias, bn.weight, bn.bias, residual}))
    return false;
  // Anything the modules would reject goes through them, for their errors.
  return x.defined() && x.dim() == 4 && x.size(1) == conv.options.in_channels() &&
         conv.options.out_channels() == bn.options.num_features() &&
         x.dtype() == conv.weight.dtype() && is_floating(x.dtype());
}

// The batch norm's eval map y = x * scale + shift, computed as its CPU kernel
// does (src/tensor/cpu/norm_batch.cc: statistics read as f32, combined in
// double, rounded once), so the fused output matches the unfused one.
std::pair<Tensor, Tensor> bn_scale_shift(const BatchNorm2dImpl& bn, DType dt) {
  const int64_t c = bn.options.num_features();
  auto as_f32 = [](const Tensor& t) {
    std::vector<float> v;
    if (!t.defined()) return v;
    for (double d : t.to_vector<double>()) v.push_back(static_cast<float>(d));
    return v;
  };
  const auto mean = as_f32(bn.running_mean), var = as_f32(bn.running_var);
  const auto w = as_f32(bn.weight), b = as_f32(bn.bias);
  std::vector<double> scale(c), shift(c);
  for (int64_t i = 0; i < c; ++i) {
    const double invstd = 1.0 / std::sqrt(double(var[i]) + bn.options.eps());
    const double s = invstd * (w.empty() ? 1.0 : double(w[i]));
    scale[i] = static_cast<float>(s);
    shift[i] = static_cast<float>((b.empty() ? 0.0 : double(b[i])) - double(mean[i]) * s);
  }
  auto on = [&](const std::vector<double>& v) {
    return from_vector<double>(v, {c}, DType::f64).to(dt).to(bn.running_mean.device());
  };
  return {on(scale), on(shift)};
}

}  // namespace

Tensor conv_bn(Conv2dImpl& conv, BatchNorm2dImpl& bn, const Tensor& x, bool relu,
               const Tensor& residual) {
  if (!fusable(conv, bn, x, residual)) {
    Tensor y = bn.forward(conv.forward(x));
    if (residual.defined()) y = y + residual;
    return relu ? qk::relu(y) : y;
  }
  ops::Conv2dParams p;
  p.stride = *conv.options.stride();
  p.padding = *conv.options.padding();
  p.dilation = *conv.options.dilation();
  p.groups = conv.options.groups();
  auto [scale, shift] = bn_scale_shift(bn, x.dtype());
  return ops::conv2d_fused(x, conv.weight, conv.bias, p, scale, shift, residual, relu);
}

}  // namespace qk::nn

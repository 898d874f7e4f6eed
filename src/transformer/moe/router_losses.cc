// The router's auxiliary losses (moe/router_losses.h) and attach_aux_loss.
#include "moe/router_losses.h"

#include <cmath>

#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/reduce.h"
#include "qk/transformer/moe_router.h"

namespace qk::transformer {

namespace moe {

Tensor z_loss(const Tensor& logits, double coeff) {
  // logsumexp around the row maximum (a constant shift: no gradient of its own).
  const Tensor shift = ops::amax(logits.detach(), {1}, /*keepdim=*/true);
  const Tensor lse = log(sum(exp(logits - shift), {1})) + shift.squeeze(1);
  return mean(square(lse)) * coeff;
}

Tensor scope_score_sums(const Tensor& scores, int64_t scopes) {
  const int64_t n = scores.size(0), e = scores.size(1);
  QK_CHECK(scopes >= 1 && n % scopes == 0, "balance loss: ", n, " tokens do not split into ", scopes, " sequences");
  return sum(scores.view({scopes, n / scopes, e}), {1});
}

Tensor balance_loss(const Tensor& score_sums, const std::vector<double>& load_fractions, int64_t tokens_per_scope,
                    double coeff) {
  const int64_t scopes = score_sums.size(0);
  const Tensor f = from_vector<double>(load_fractions, score_sums.shape()).to(score_sums.dtype()).to(score_sums.device());
  return sum(score_sums * f) * (coeff / (static_cast<double>(scopes) * static_cast<double>(tokens_per_scope)));
}

std::vector<double> expert_load_fractions(const std::vector<double>& routes, int64_t num_experts, int64_t topk,
                                          int64_t tokens_per_scope) {
  const double scale = static_cast<double>(num_experts) / (static_cast<double>(topk * tokens_per_scope));
  std::vector<double> f(routes.size());
  for (size_t i = 0; i < routes.size(); ++i) f[i] = routes[i] * scale;
  return f;
}

std::vector<double> device_load_fractions(const std::vector<double>& expert_fractions, int64_t num_experts,
                                          int64_t num_devices) {
  const int64_t per = num_experts / num_devices, scopes = static_cast<int64_t>(expert_fractions.size()) / num_experts;
  std::vector<double> f(expert_fractions.size());
  for (int64_t s = 0; s < scopes; ++s)
    for (int64_t d = 0; d < num_devices; ++d) {
      const double* group = expert_fractions.data() + s * num_experts + d * per;
      double mean = 0;
      for (int64_t j = 0; j < per; ++j) mean += group[j];
      mean /= static_cast<double>(per);
      for (int64_t j = 0; j < per; ++j) f[s * num_experts + d * per + j] = mean;
    }
  return f;
}

std::vector<double> comm_load_fractions(const std::vector<double>& tokens_per_device, int64_t num_experts,
                                        int64_t num_devices, int64_t devices_per_token, int64_t tokens_per_scope) {
  const int64_t per = num_experts / num_devices, scopes = static_cast<int64_t>(tokens_per_device.size()) / num_devices;
  const double scale = static_cast<double>(num_devices) / static_cast<double>(devices_per_token * tokens_per_scope);
  std::vector<double> f(static_cast<size_t>(scopes * num_experts));
  for (int64_t s = 0; s < scopes; ++s)
    for (int64_t j = 0; j < num_experts; ++j) f[s * num_experts + j] = tokens_per_device[s * num_devices + j / per] * scale;
  return f;
}

}  // namespace moe

Tensor attach_aux_loss(const Tensor& x, const Tensor& loss, double backward_scale) {
  QK_CHECK(loss.numel() == 1, "attach_aux_loss: the loss must be a scalar, got ", shape_str(loss.shape()));
  if (!autograd::needs_grad({x, loss})) return x;
  // A fresh handle on x's data: the node's output (no copy).
  Tensor out = make_tensor(x.storage(), x.dtype(), x.sizes(), x.strides(), x.storage_offset());
  const Shape loss_shape = loss.shape();
  const DType loss_dtype = loss.dtype();
  const Device loss_device = loss.device();
  autograd::record("MoEAuxLossAutoScalerBackward", {x, loss}, {out},
                   [loss_shape, loss_dtype, loss_device, backward_scale](const std::vector<Tensor>& g) {
                     return std::vector<Tensor>{
                         g[0], full(loss_shape, backward_scale, TensorOptions(loss_dtype).device(loss_device))};
                   });
  return out;
}

int64_t moe_capacity(int64_t num_tokens, int64_t num_experts, double capacity_factor) {
  QK_CHECK(num_tokens >= 0 && num_experts >= 1 && capacity_factor > 0, "moe_capacity: ", num_tokens, " tokens, ",
           num_experts, " experts, factor ", capacity_factor);
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(num_tokens) / static_cast<double>(num_experts) * capacity_factor));
}

}  // namespace qk::transformer

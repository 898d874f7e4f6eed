// The shared experts (Megatron's SharedExpertMLP): one MLP of width
// moe_shared_expert_intermediate_size over every token, split over TP as the
// routed experts are, so its partial output joins theirs before the layer's
// reduce-scatter.
#include "moe/expert_weights.h"
#include "qk/autograd/functions.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

SharedExpertsImpl::SharedExpertsImpl(const TransformerConfig& c, ExpertLayout layout)
    : gated_(c.gated_linear_unit), activation_(c.activation_func), layout_(layout) {
  check_expert_layout(c, layout);
  QK_CHECK(c.moe_shared_expert_intermediate_size > 0,
           "SharedExperts: moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size) must be set");
  MlpWeights w = draw_mlp_weights(c, c.moe_shared_expert_intermediate_size, layout);
  register_mlp_weights(*this, w);
  fc1_weight = w.fc1_weight;
  fc1_bias = w.fc1_bias;
  fc2_weight = w.fc2_weight;
  fc2_bias = w.fc2_bias;
}

Tensor SharedExpertsImpl::forward(const Tensor& x) {
  const Tensor h = mlp_activation(linear(x, fc1_weight, fc1_bias), activation_, gated_);
  const Tensor b2 = fc2_bias.defined() ? fc2_bias_on_this_rank({fc2_bias}, layout_)[0] : Tensor();
  return linear(h, fc2_weight, b2);
}

}  // namespace qk::transformer

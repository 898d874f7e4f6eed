// Expert MLP weights: Megatron's initialisation on the full weights, then
// this rank's tensor-parallel shard.
#include "moe/expert_weights.h"

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"

namespace qk::transformer {

void check_expert_layout(const TransformerConfig& c, const ExpertLayout& l) {
  QK_CHECK(c.num_moe_experts > 0, "MoE: num_moe_experts (--num-experts) must be set for an MoE layer");
  QK_CHECK(l.ep_size >= 1 && l.ep_rank >= 0 && l.ep_rank < l.ep_size && l.tp_size >= 1 && l.tp_rank >= 0 &&
               l.tp_rank < l.tp_size,
           "MoE: bad rank layout ep ", l.ep_rank, "/", l.ep_size, ", tp ", l.tp_rank, "/", l.tp_size);
  QK_CHECK(c.num_moe_experts % l.ep_size == 0, "MoE: num_moe_experts (--num-experts ", c.num_moe_experts,
           ") must be a multiple of the expert-parallel size (", l.ep_size, ")");
  QK_CHECK(c.expert_model_parallel_size == l.ep_size, "MoE: the config's expert_model_parallel_size (",
           c.expert_model_parallel_size, ") differs from the expert-parallel group's size (", l.ep_size,
           "); set --expert-model-parallel-size from the parallel state");
  QK_CHECK(c.moe_ffn_hidden_size % l.tp_size == 0, "MoE: moe_ffn_hidden_size (--moe-ffn-hidden-size ",
           c.moe_ffn_hidden_size, ") must be divisible by the tensor-parallel size (", l.tp_size, ")");
  QK_CHECK(c.moe_shared_expert_intermediate_size % l.tp_size == 0,
           "MoE: moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size ",
           c.moe_shared_expert_intermediate_size, ") must be divisible by the tensor-parallel size (", l.tp_size, ")");
}

parallel::ShardSpec fc1_shard_spec(const TransformerConfig& c) { return {0, c.gated_linear_unit ? 2 : 1}; }
parallel::ShardSpec fc2_shard_spec() { return {1, 1}; }

MlpWeights draw_mlp_weights(const TransformerConfig& c, int64_t width, const ExpertLayout& l) {
  const int64_t fc1_rows = c.gated_linear_unit ? 2 * width : width;
  NoGradGuard no_grad;
  Tensor fc1 = empty({fc1_rows, c.hidden_size});
  init_normal(fc1, c);
  Tensor fc2 = empty({c.hidden_size, width});
  init_scaled_normal(fc2, c);
  const int r = static_cast<int>(l.tp_rank), n = static_cast<int>(l.tp_size);
  MlpWeights w;
  w.fc1_weight = parallel::shard_tensor(fc1, fc1_shard_spec(c), r, n);
  w.fc2_weight = parallel::shard_tensor(fc2, fc2_shard_spec(), r, n);
  if (c.add_bias_linear) {
    w.fc1_bias = zeros({fc1_rows / l.tp_size});
    w.fc2_bias = zeros({c.hidden_size});
  }
  return w;
}

void register_mlp_weights(nn::Module& owner, MlpWeights& w) {
  auto fc1 = owner.register_module("linear_fc1", std::make_shared<nn::Module>("ExpertLinear"));
  auto fc2 = owner.register_module("linear_fc2", std::make_shared<nn::Module>("ExpertLinear"));
  // register_parameter stores a detached copy of the handle: keep what it returns.
  w.fc1_weight = fc1->register_parameter("weight", w.fc1_weight);
  w.fc1_bias = fc1->register_parameter("bias", w.fc1_bias);
  w.fc2_weight = fc2->register_parameter("weight", w.fc2_weight);
  w.fc2_bias = fc2->register_parameter("bias", w.fc2_bias);
}

std::vector<Tensor> fc2_bias_on_this_rank(const std::vector<Tensor>& biases, const ExpertLayout& l) {
  if (l.tp_rank == 0) return biases;
  std::vector<Tensor> zeroed;
  zeroed.reserve(biases.size());
  for (const Tensor& b : biases) zeroed.push_back(b * 0.0);
  return zeroed;
}

}  // namespace qk::transformer

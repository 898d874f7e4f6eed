// The routed experts of one expert-parallel rank: Megatron's GroupedMLP
// (--moe-grouped-gemm) or SequentialMLP, with the local experts registered
// under their global index.
#include "moe/expert_weights.h"
#include "qk/autograd/functions.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

ExpertsImpl::ExpertsImpl(const TransformerConfig& c, ExpertLayout layout)
    : grouped_gemm_(c.moe_grouped_gemm), gated_(c.gated_linear_unit), activation_(c.activation_func),
      layout_(layout) {
  check_expert_layout(c, layout);
  const int64_t experts = c.num_moe_experts, local = experts / layout.ep_size;
  first_expert_ = layout.ep_rank * local;
  auto local_experts = register_module("local_experts", std::make_shared<nn::Module>("LocalExperts"));
  // Every expert's full weights are drawn, in global order, on every rank
  // (Megatron's --use-cpu-initialization): expert e is the same at any
  // expert- and tensor-parallel size.
  for (int64_t e = 0; e < experts; ++e) {
    MlpWeights w = draw_mlp_weights(c, c.moe_ffn_hidden_size, layout);
    if (e < first_expert_ || e >= first_expert_ + local) continue;
    auto expert = local_experts->register_module(std::to_string(e), std::make_shared<nn::Module>("Expert"));
    register_mlp_weights(*expert, w);
    fc1_weight.push_back(w.fc1_weight);
    fc1_bias.push_back(w.fc1_bias);
    fc2_weight.push_back(w.fc2_weight);
    fc2_bias.push_back(w.fc2_bias);
  }
}

Tensor ExpertsImpl::forward(const Tensor& x, const std::vector<int64_t>& rows) {
  QK_CHECK(static_cast<int64_t>(rows.size()) == num_local_experts(), "Experts: ", rows.size(),
           " row counts for ", num_local_experts(), " local experts");
  QK_CHECK(x.dim() == 2, "Experts: expected x [R, C], got ", shape_str(x.shape()));
  const bool bias = fc1_bias[0].defined();
  const std::vector<Tensor> b2 = bias ? fc2_bias_on_this_rank(fc2_bias, layout_) : std::vector<Tensor>{};
  if (grouped_gemm_) {
    const Tensor h = grouped_linear(x, rows, fc1_weight, bias ? fc1_bias : std::vector<Tensor>{});
    return grouped_linear(mlp_activation(h, activation_, gated_), rows, fc2_weight, b2);
  }
  // SequentialMLP: each expert's MLP on its rows, one after another.
  std::vector<Tensor> outputs;
  int64_t at = 0;
  for (size_t l = 0; l < rows.size(); ++l) {
    const Tensor xe = x.narrow(0, at, rows[l]);
    const Tensor h = mlp_activation(linear(xe, fc1_weight[l], fc1_bias[l]), activation_, gated_);
    outputs.push_back(linear(h, fc2_weight[l], bias ? b2[l] : Tensor()));
    at += rows[l];
  }
  QK_CHECK(at == x.size(0), "Experts: the row counts add up to ", at, ", x has ", x.size(0), " rows");
  return cat(outputs, 0);
}

}  // namespace qk::transformer

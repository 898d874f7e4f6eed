// MoELayer: router -> token dispatcher -> experts -> combine (+ shared experts).
//
// Note [MoE under tensor parallelism]: the sequence shards are gathered over
// TP first, so every TP rank routes the whole sequence exactly as an unsplit
// layer would (capacity drops included). The experts and shared experts then
// compute partial outputs (fc2 is row-parallel), summed by the final
// reduce-scatter; the gather's backward reduce-scatters their partial input
// gradients. The router's computation is replicated instead, so:
//  - its probabilities' gradients, partial on each rank (each sees its part
//    of the expert outputs), are all-reduced over TP
//    (copy_to_tensor_model_parallel_region), which makes the router's weight
//    gradients whole and equal on every TP rank;
//  - its input gradient, now whole on every rank, is scaled by 1/tp, so the
//    gather's reduce-scatter counts it once.
#include <numeric>

#include "moe/expert_weights.h"
#include "moe/token_dispatcher.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/mappings.h"
#include "qk/tensor/ops/elementwise.h"

namespace qk::transformer {

namespace {

// Identity forward; the gradient times `scale` in backward.
Tensor scale_gradient(const Tensor& x, double scale) {
  Tensor out = x.detach();
  autograd::record("ScaleGradientBackward", {x}, {out}, [scale](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ops::binary_scalar(BinaryOp::mul, g[0], scale)};
  });
  return out;
}

ExpertLayout layout_of(const MoEParallel& g) {
  ExpertLayout l;
  if (g.ep) {
    l.ep_rank = g.ep->rank();
    l.ep_size = g.ep->size();
  }
  if (g.tp) {
    l.tp_rank = g.tp->rank();
    l.tp_size = g.tp->size();
  }
  return l;
}

std::string expert_prefix(int64_t e) { return "experts.local_experts." + std::to_string(e) + "."; }

}  // namespace

MoELayerImpl::MoELayerImpl(const TransformerConfig& c, int64_t layer_number, MoEParallel groups)
    : config_(c), groups_(std::move(groups)), layout_(layout_of(groups_)) {
  QK_CHECK(c.num_moe_experts > 0 && c.moe_ffn_hidden_size > 0, "MoELayer: needs num_moe_experts (--num-experts) "
           "and moe_ffn_hidden_size; build it from a validated config (TransformerConfig::validate)");
  if (layout_.tp_size > 1) {
    QK_CHECK(c.tensor_model_parallel_size == layout_.tp_size, "MoELayer: the config's tensor_model_parallel_size (",
             c.tensor_model_parallel_size, ") differs from the tensor-parallel group's size (", layout_.tp_size, ")");
    QK_CHECK(c.sequence_parallel, "MoELayer: MoE with tensor parallelism needs sequence parallelism "
             "(--sequence-parallel), as in Megatron");
  }
  QK_CHECK(!c.moe_shared_expert_overlap || c.moe_token_dispatcher_type == MoETokenDispatcher::alltoall,
           "--moe-shared-expert-overlap works with --moe-token-dispatcher-type alltoall only (as in Megatron)");
  QK_CHECK(!c.moe_shared_expert_overlap || c.moe_shared_expert_intermediate_size > 0,
           "--moe-shared-expert-overlap needs shared experts (--moe-shared-expert-intermediate-size)");
  QK_CHECK(!(c.moe_pad_expert_input_to_capacity && c.moe_device_level_capacity),
           "--moe-pad-expert-input-to-capacity pads each expert to its own capacity; it does not combine with "
           "--moe-device-level-capacity");
  // Registration (and so initialisation) order as Megatron's MoELayer.
  router = register_module("router", TopKRouter(c, layer_number));
  experts = register_module("experts", Experts(c, layout_));
  if (c.moe_shared_expert_intermediate_size > 0)
    shared_experts = register_module("shared_experts", SharedExperts(c, layout_));
  dispatcher_ = make_token_dispatcher(c, groups_.ep);
}

MoELayerImpl::~MoELayerImpl() = default;

Tensor MoELayerImpl::forward(const Tensor& hidden) {
  const int64_t c = config_.hidden_size;
  QK_CHECK(hidden.dim() == 3 && hidden.size(2) == c, "MoELayer: expected hidden [B, T",
           layout_.tp_size > 1 ? "/tp" : "", ", ", c, "], got ", shape_str(hidden.shape()));
  dist::ProcessGroup* tp = layout_.tp_size > 1 ? groups_.tp.get() : nullptr;
  const int64_t b = hidden.size(0);
  // Note [MoE under tensor parallelism].
  const Tensor sequence = tp ? parallel::gather_from_sequence_parallel_region(hidden, *tp, 1, true) : hidden;
  const int64_t t = sequence.size(1);
  const Tensor x = sequence.reshape({b * t, c});  // token n = b * T + t
  const RoutingDecision routing = router->forward(tp ? scale_gradient(x, 1.0 / layout_.tp_size) : x, b);
  const Tensor probs = tp ? parallel::copy_to_tensor_model_parallel_region(routing.probs, *tp) : routing.probs;

  Tensor shared;
  std::function<void()> run_shared;
  if (shared_experts) run_shared = [&] { shared = shared_experts->forward(x); };
  // --moe-shared-expert-overlap: the shared experts run while the tokens travel.
  const bool overlap = config_.moe_shared_expert_overlap;
  const Tensor rows =
      dispatcher_->dispatch(x, probs, routing.routing_map, routing.dropped_routes, overlap ? run_shared : nullptr);
  Tensor out = dispatcher_->combine(experts->forward(rows, dispatcher_->tokens_per_local_expert()));
  if (run_shared && !overlap) run_shared();
  if (shared.defined()) out = out + shared;
  out = out.reshape({b, t, c});
  if (tp) out = parallel::reduce_scatter_to_sequence_parallel_region(out, *tp, 1);

  stats_.tokens_per_expert = dispatcher_->global_tokens_per_expert();
  stats_.dropped_routes = dispatcher_->global_dropped_routes();
  stats_.padding_rows = dispatcher_->padding_rows();
  stats_.load_balancing_loss = routing.load_balancing_loss;
  stats_.z_loss = routing.z_loss;
  stats_.device_level_aux_loss = routing.device_level_aux_loss;
  stats_.comm_aux_loss = routing.comm_aux_loss;
  return out;
}

std::vector<std::pair<std::string, parallel::ShardSpec>> MoELayerImpl::shard_specs() const {
  std::vector<std::pair<std::string, parallel::ShardSpec>> specs;
  const parallel::ShardSpec fc1 = fc1_shard_spec(config_), fc2 = fc2_shard_spec();
  const bool bias = config_.add_bias_linear;
  auto add_mlp = [&](const std::string& prefix) {
    specs.emplace_back(prefix + "linear_fc1.weight", fc1);
    if (bias) specs.emplace_back(prefix + "linear_fc1.bias", fc1);
    specs.emplace_back(prefix + "linear_fc2.weight", fc2);
  };
  for (int64_t l = 0; l < experts->num_local_experts(); ++l) add_mlp(expert_prefix(experts->first_expert() + l));
  if (shared_experts) add_mlp("shared_experts.");
  return specs;
}

std::vector<std::string> MoELayerImpl::partial_gradient_parameters() const {
  std::vector<std::string> names;
  if (layout_.tp_size == 1 || !config_.add_bias_linear) return names;
  for (int64_t l = 0; l < experts->num_local_experts(); ++l)
    names.push_back(expert_prefix(experts->first_expert() + l) + "linear_fc2.bias");
  if (shared_experts) names.push_back("shared_experts.linear_fc2.bias");
  return names;
}

TransformerLayerSpec with_moe_layers(TransformerLayerSpec spec, MoEParallel groups) {
  auto dense = spec.mlp;
  spec.mlp = [dense, groups](const TransformerConfig& c, int64_t layer_number) -> std::shared_ptr<MlpBase> {
    if (c.is_moe_layer(layer_number)) return std::make_shared<MoELayerImpl>(c, layer_number, groups);
    return dense(c, layer_number);
  };
  return spec;
}

std::vector<MoELayerImpl*> moe_layers(nn::Module& model) {
  std::vector<MoELayerImpl*> out;
  for (const auto& m : model.modules())
    if (auto* moe = dynamic_cast<MoELayerImpl*>(m.get())) out.push_back(moe);
  return out;
}

bool is_expert_parameter(std::string_view name) {
  constexpr std::string_view kExperts = "experts.local_experts.";
  return name.starts_with(kExperts) || name.find(std::string(".") + std::string(kExperts)) != std::string_view::npos;
}

}  // namespace qk::transformer

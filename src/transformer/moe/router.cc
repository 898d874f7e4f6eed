// TopKRouter (qk/transformer/moe_router.h): gating, top-k weights, capacity,
// and the losses attached to the weights.
#include "qk/transformer/moe_router.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include "moe/router_losses.h"
#include "moe/routing.h"
#include "qk/autograd/functions.h"
#include "qk/dist/process_group.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

namespace {

int64_t size_of(dist::ProcessGroup* group) { return group ? group->size() : 1; }

// The counts summed over the group's ranks (none: as they are).
std::vector<double> summed_over(dist::ProcessGroup* group, const std::vector<int64_t>& counts) {
  if (!group || group->size() == 1) return {counts.begin(), counts.end()};
  Tensor t = from_vector<int64_t>(counts, {static_cast<int64_t>(counts.size())});
  group->all_reduce(t);
  const int64_t* sum = t.data_ptr<int64_t>();
  return {sum, sum + counts.size()};
}

bool is_aux_loss_type(MoELoadBalancing type) {
  return type == MoELoadBalancing::aux_loss || type == MoELoadBalancing::seq_aux_loss ||
         type == MoELoadBalancing::global_aux_loss;
}

}  // namespace

TopKRouterImpl::TopKRouterImpl(const TransformerConfig& c, int64_t layer_number)
    : config_(c), layer_number_(layer_number) {
  const int64_t e = c.num_moe_experts;
  QK_CHECK(e >= 1 && c.hidden_size >= 1, "TopKRouter: needs num_moe_experts (--num-experts) and hidden_size, got ", e,
           " and ", c.hidden_size);
  c.check_moe_routing();
  num_devices_ = c.moe_router_num_groups > 0 ? c.moe_router_num_groups : c.expert_model_parallel_size;

  weight = register_parameter("weight", empty({e, c.hidden_size}));
  init_normal(weight, c);
  if (c.moe_router_enable_expert_bias) {
    expert_bias = register_buffer("expert_bias", zeros({e}));
    local_tokens_per_expert_.assign(static_cast<size_t>(e), 0);
  }
  if (c.moe_router_load_balancing_type == MoELoadBalancing::global_aux_loss)
    global_tokens_per_expert_.assign(static_cast<size_t>(e), 0.0);
}

RoutingDecision TopKRouterImpl::forward(const Tensor& hidden, int64_t batch_size) {
  const TransformerConfig& c = config_;
  const int64_t e = c.num_moe_experts, k = c.moe_router_topk;
  QK_CHECK(hidden.dim() == 2 && hidden.size(1) == c.hidden_size, "TopKRouter: expected hidden [N, ", c.hidden_size,
           "], got ", shape_str(hidden.shape()));
  const int64_t n = hidden.size(0);
  QK_CHECK(batch_size >= 1 && n % batch_size == 0, "TopKRouter: ", n, " tokens are not ", batch_size,
           " sequences of equal length");
  keep_expert_bias_f32();
  const bool training = is_training();
  const bool with_losses = training && autograd::grad_mode_enabled();
  const DType dt = hidden.dtype() == DType::f64 ? DType::f64 : DType::f32;

  // Jitter in training only, grad mode or not: a checkpointed re-run (same
  // generator state) must route as its forward did.
  Tensor x = hidden.to(dt);
  if (training && c.moe_input_jitter_eps > 0) {
    const double eps = c.moe_input_jitter_eps;
    x = x * (rand(x.shape(), dt) * (2 * eps) + (1 - eps));
  }
  Tensor logits = linear(x, weight.to(dt));
  RoutingDecision d;
  if (with_losses && c.moe_z_loss_coeff > 0) {
    const int64_t partition = size_of(sequence_partition_group_);
    const Tensor z = moe::z_loss(logits, c.moe_z_loss_coeff / static_cast<double>(partition));
    d.z_loss = z.item_double() * static_cast<double>(partition);
    logits = attach_aux_loss(logits, z, aux_loss_backward_scale_);
  }
  d.logits = logits.detach();

  // The top-k choice (constant indices) and the weights of the chosen experts
  // (differentiable). `scores` keeps the score function's values when computed.
  const int64_t groups = c.moe_router_num_groups, group_topk = c.moe_router_group_topk;
  // The choice is made on the host (idx_host: the counts, the capacity and
  // the routing map read it there); top_idx is its copy on the logits' device.
  Tensor scores, idx_host, top_idx, top_probs;
  auto choose = [&](Tensor host) {
    idx_host = std::move(host);
    top_idx = idx_host.to(logits.device());
  };
  if (c.moe_router_load_balancing_type == MoELoadBalancing::sinkhorn) {
    const Tensor act = k == 1 ? sigmoid(logits) : softmax(logits, 1);
    choose(training ? moe::sinkhorn_topk_indices(d.logits, k) : moe::topk_indices(act.detach(), k));
    top_probs = gather(act, 1, top_idx);
  } else {
    if (c.moe_router_score_function == MoEScoreFunction::softmax) {
      if (c.moe_router_pre_softmax) {
        scores = softmax(logits, 1);
        choose(moe::topk_indices(scores.detach(), k, nullptr, groups, group_topk));
        top_probs = gather(scores, 1, top_idx);
      } else {
        choose(moe::topk_indices(d.logits, k, nullptr, groups, group_topk));
        top_probs = softmax(gather(logits, 1, top_idx), 1);
      }
    } else {
      scores = sigmoid(logits);
      const std::vector<float> bias = expert_bias.defined() ? expert_bias.to_vector<float>() : std::vector<float>{};
      choose(moe::topk_indices(scores.detach(), k, bias.empty() ? nullptr : bias.data(), groups, group_topk));
      top_probs = gather(scores, 1, top_idx);
      if (k > 1) top_probs = top_probs / (sum(top_probs, {1}, /*keepdim=*/true) + 1e-20);
    }
    if (c.moe_router_topk_scaling_factor) top_probs = top_probs * *c.moe_router_topk_scaling_factor;
  }

  // Capacity: per expert, or per device group of E / D experts.
  std::vector<uint8_t> keep(static_cast<size_t>(n * k), 1);
  if (c.moe_expert_capacity_factor) {
    const int64_t per = c.moe_device_level_capacity ? e / num_devices_ : 1;
    const int64_t capacity = moe_capacity(n * k, e, *c.moe_expert_capacity_factor);
    keep = moe::capacity_keep(idx_host, top_probs.detach(), e, per, capacity * per, c.moe_token_drop_policy);
    d.dropped_routes = std::count(keep.begin(), keep.end(), uint8_t{0});
    if (d.dropped_routes > 0)
      top_probs = top_probs * moe::keep_weights(keep, top_probs.shape(), dt).to(top_probs.device());
  }
  Tensor probs = scatter_add(zeros({n, e}, TensorOptions(dt).device(top_probs.device())), 1, top_idx, top_probs);
  d.routing_map = moe::routing_map_of(idx_host, keep, e);
  d.tokens_per_expert = moe::count_routes(idx_host, e, 1, keep.data());

  if (with_losses) probs = attach_balance_losses(probs, logits, scores, idx_host, batch_size, d);
  if (expert_bias.defined() && with_losses)
    for (int64_t j = 0; j < e; ++j) local_tokens_per_expert_[j] += d.tokens_per_expert[j];
  d.probs = probs;
  return d;
}

Tensor TopKRouterImpl::attach_balance_losses(Tensor probs, const Tensor& logits, const Tensor& scores,
                                             const Tensor& top_idx, int64_t batch_size, RoutingDecision& d) {
  const TransformerConfig& c = config_;
  const int64_t n = logits.size(0), e = c.num_moe_experts, k = c.moe_router_topk;
  const MoELoadBalancing type = c.moe_router_load_balancing_type;
  const double aux_coeff = is_aux_loss_type(type) ? c.moe_aux_loss_coeff : 0.0;
  const double device_coeff = c.moe_device_level_aux_loss_coeff, comm_coeff = c.moe_comm_aux_loss_coeff;
  if (aux_coeff == 0 && device_coeff == 0 && comm_coeff == 0) return probs;

  // Megatron's compute_routing_scores_for_aux_loss: softmax, or sigmoid normalised per token.
  Tensor aux_scores;
  if (c.moe_router_score_function == MoEScoreFunction::softmax) {
    aux_scores = scores.defined() ? scores : softmax(logits, 1);
  } else {
    const Tensor s = scores.defined() ? scores : sigmoid(logits);
    aux_scores = s / (sum(s, {1}, /*keepdim=*/true) + 1e-20);
  }
  const int64_t scopes = type == MoELoadBalancing::seq_aux_loss ? batch_size : 1;
  const int64_t tokens = n / scopes * size_of(sequence_partition_group_);  // per scope, over the partition
  const Tensor sums = moe::scope_score_sums(aux_scores, scopes);

  if (aux_coeff > 0) {
    // Counted on the plain top-k of the aux scores (the router's own choice
    // when it has neither groups nor bias: the same order).
    const bool plain = c.moe_router_num_groups == 0 && !expert_bias.defined();
    const Tensor loss_idx = plain ? top_idx : moe::topk_indices(aux_scores.detach(), k);
    Tensor loss;
    if (type == MoELoadBalancing::global_aux_loss) {
      const std::vector<double> counts = summed_over(global_aux_loss_group_, moe::count_routes(loss_idx, e, 1));
      ++global_aux_loss_steps_;
      std::vector<double> average(static_cast<size_t>(e));
      for (int64_t j = 0; j < e; ++j) {
        global_tokens_per_expert_[j] += counts[j];
        average[j] = global_tokens_per_expert_[j] / static_cast<double>(global_aux_loss_steps_);
      }
      const int64_t global_tokens = n * size_of(global_aux_loss_group_);
      loss = moe::balance_loss(sums, moe::expert_load_fractions(average, e, k, global_tokens), global_tokens,
                               aux_coeff);
    } else {
      const std::vector<double> counts =
          summed_over(sequence_partition_group_, moe::count_routes(loss_idx, e, scopes));
      loss = moe::balance_loss(sums, moe::expert_load_fractions(counts, e, k, tokens), tokens, aux_coeff);
    }
    d.load_balancing_loss = loss.item_double();
    probs = attach_aux_loss(probs, loss, aux_loss_backward_scale_);
  }

  // DeepSeek-V2's device-level and communication losses, on the router's choice.
  if (device_coeff > 0) {
    const std::vector<double> routes = summed_over(sequence_partition_group_, moe::count_routes(top_idx, e, scopes));
    const std::vector<double> f =
        moe::device_load_fractions(moe::expert_load_fractions(routes, e, k, tokens), e, num_devices_);
    const Tensor loss = moe::balance_loss(sums, f, tokens, device_coeff);
    d.device_level_aux_loss = loss.item_double();
    probs = attach_aux_loss(probs, loss, aux_loss_backward_scale_);
  }
  if (comm_coeff > 0) {
    const std::vector<double> sent =
        summed_over(sequence_partition_group_, moe::count_tokens_per_device(top_idx, e, num_devices_, scopes));
    const int64_t devices_per_token = c.moe_router_num_groups > 0 ? c.moe_router_group_topk : std::min(k, num_devices_);
    const std::vector<double> f = moe::comm_load_fractions(sent, e, num_devices_, devices_per_token, tokens);
    const Tensor loss = moe::balance_loss(sums, f, tokens, comm_coeff);
    d.comm_aux_loss = loss.item_double();
    probs = attach_aux_loss(probs, loss, aux_loss_backward_scale_);
  }
  return probs;
}

void TopKRouterImpl::update_expert_bias(dist::ProcessGroup* group) {
  QK_CHECK(expert_bias.defined(), "update_expert_bias: this router has no expert bias; set "
           "moe_router_enable_expert_bias (--moe-router-enable-expert-bias)");
  keep_expert_bias_f32();
  const int64_t e = config_.num_moe_experts;
  const std::vector<double> load = summed_over(group, local_tokens_per_expert_);
  double mean = 0;
  for (double l : load) mean += l;
  mean /= static_cast<double>(e);
  const float rate = static_cast<float>(config_.moe_router_bias_update_rate);
  NoGradGuard no_grad;
  const Tensor bias = ops::contiguous(expert_bias).to(kCPU);  // E values: updated on the host
  float* b = bias.data_ptr<float>();
  for (int64_t j = 0; j < e; ++j) {
    const double offset = mean - load[j];
    b[j] += offset > 0 ? rate : offset < 0 ? -rate : 0.0f;
  }
  if (!bias.is_same(expert_bias)) expert_bias.copy_(bias);
  expert_bias.bump_version();
  std::fill(local_tokens_per_expert_.begin(), local_tokens_per_expert_.end(), 0);
}

void TopKRouterImpl::set_aux_loss_backward_scale(double scale) {
  QK_CHECK(std::isfinite(scale), "set_aux_loss_backward_scale: the scale must be finite, got ", scale);
  aux_loss_backward_scale_ = scale;
}

void TopKRouterImpl::reset_global_aux_loss_tracker() {
  std::fill(global_tokens_per_expert_.begin(), global_tokens_per_expert_.end(), 0.0);
  global_aux_loss_steps_ = 0;
}

void TopKRouterImpl::keep_expert_bias_f32() {
  if (!expert_bias.defined() || expert_bias.dtype() == DType::f32) return;
  // Repoint the buffer's own impl, as Module::to() does: every handle sees f32.
  const Tensor f32 = ops::contiguous(ops::cast(expert_bias, DType::f32));
  TensorImpl* impl = expert_bias.impl();
  impl->storage = f32.storage();
  impl->offset = f32.storage_offset();
  impl->sizes = f32.sizes();
  impl->strides = f32.strides();
  impl->dtype = DType::f32;
  ++impl->version;
}

void TopKRouterImpl::pretty_print(std::ostream& os) const {
  os << "TopKRouter(layer=" << layer_number_ << ", num_experts=" << config_.num_moe_experts
     << ", topk=" << config_.moe_router_topk << ", score_function=" << to_string(config_.moe_router_score_function)
     << ", load_balancing=" << to_string(config_.moe_router_load_balancing_type) << ")";
}

}  // namespace qk::transformer

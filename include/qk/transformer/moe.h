// Mixture of experts (Megatron-core's megatron/core/transformer/moe): the MoE
// MLP of a transformer layer, its experts, the token permutation and the
// expert-parallel token dispatchers.
//
//   TransformerConfig c = ...;                   // num_moe_experts 8, moe_router_topk 2,
//   c.moe_ffn_hidden_size = 64;                  // moe_token_dispatcher_type alltoall, ...
//   c.expert_model_parallel_size = ep->size();
//   MoELayer moe(c, /*layer_number=*/1, MoEParallel{.ep = ep, .tp = tp});   // this rank's experts only
//   Tensor out = moe(hidden);                    // [B, T(/tp), C] -> same
//   out.sum().backward();
//   moe->last_stats().tokens_per_expert;         // [8], over the expert-parallel group
//
// Parameter names (Megatron-core's, with the GLOBAL expert index e, so state
// dicts match by name at any expert-parallel size):
//   router.weight                                 [E, C]
//   experts.local_experts.{e}.linear_fc1.weight   [2F or F, C]  (.bias [2F or F])
//   experts.local_experts.{e}.linear_fc2.weight   [C, F]        (.bias [C])
//   shared_experts.linear_fc1.weight / linear_fc2.weight (an MLP of width
//   moe_shared_expert_intermediate_size)
// Initialisation as Megatron (fc1 init_method, fc2 output_layer_init_method):
// every rank draws every expert's full weights in global order and keeps its
// own (and, under tensor parallelism, its shard), so the same seed gives the
// same expert e at any expert- and tensor-parallel size.
//
// Tensor parallelism (Megatron's default expert_tensor_parallel_size = TP;
// MoE with TP > 1 needs --sequence-parallel, as Megatron): the layer gathers
// the sequence over TP before routing, so every TP rank routes the same
// tokens as an unsplit run (its capacity and losses included; the router
// gets no sequence-partition group); each expert (and the shared experts)
// holds column-parallel fc1 rows and row-parallel fc2 columns, and the
// summed partial outputs are reduce-scattered back to the sequence shards.
// The router's weights get whole (equal) gradients on every TP rank.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "qk/dist/process_group.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/layers.h"
#include "qk/transformer/moe_router.h"

namespace qk::transformer {

// ---- grouped GEMM (--moe-grouped-gemm) ----

// x [M, K] with rows sorted by group (group g: the next rows[g] rows, possibly
// none); weights[g] [N, K], biases empty or one [N] per group -> [M, N] with
// group g's rows x_g . weights[g]^T + biases[g]. One call for all groups
// (qk::ops::grouped_mm), differentiable in x, every weight and bias; under
// autocast it runs in the low dtype, as linear does.
Tensor grouped_linear(const Tensor& x, const std::vector<int64_t>& rows, const std::vector<Tensor>& weights,
                      const std::vector<Tensor>& biases = {});

// ---- token permutation (Megatron's moe_utils.permute / unpermute) ----

// Where each routed token goes: rows sorted by expert (the map's columns),
// within an expert by token (stable). With a capacity (the router's
// moe_capacity), every expert's rows are padded to exactly `capacity` with
// zero rows (--moe-pad-expert-input-to-capacity) that never reach the output.
struct TokenPermutation {
  int64_t num_tokens = 0;
  int64_t num_experts = 0;                 // columns of the routing map
  std::vector<int64_t> tokens_per_expert;  // rows per expert, padding included
  std::vector<int64_t> row_token;          // source token of each row; -1 for a padding row
  std::vector<int64_t> row_expert;         // expert (map column) of each row
  // Token n's rows (ascending): token_rows[token_offsets[n] .. token_offsets[n + 1]).
  std::vector<int64_t> token_offsets, token_rows;
  int64_t num_rows() const { return static_cast<int64_t>(row_token.size()); }
};
using TokenPermutationPtr = std::shared_ptr<const TokenPermutation>;

// routing_map [N, E] bool. capacity > 0 pads each expert to it (an expert
// with more routes than that is a ValueError: the router drops to capacity).
TokenPermutationPtr make_token_permutation(const Tensor& routing_map, int64_t capacity = 0);
// tokens [N, C] -> [R, C]: row r is tokens[row_token[r]] (zeros for padding).
// fused (--moe-permute-fusion): one pass each way; else index_select over
// the tokens with a zero row appended. Equal results.
Tensor permute_tokens(const Tensor& tokens, const TokenPermutationPtr& p, bool fused = true);
// rows [R, C], probs [N, E] -> [N, C] in rows' dtype:
// out[n] = sum over n's rows r of probs[n, row_expert[r]] * rows[r], summed in
// f32 (f64 for f64 inputs). Differentiable in rows and probs; fused or the
// unfused composition (index_select, multiply, scatter_add).
Tensor unpermute_tokens(const Tensor& rows, const Tensor& probs, const TokenPermutationPtr& p, bool fused = true);
// x's consecutive row blocks (block i has sizes[i] rows) in the order
// `order` (a permutation of the block indices), differentiable: Megatron's
// sort_chunks_by_idxs, which puts tokens received from every expert-parallel
// rank in local-expert order.
Tensor permute_row_blocks(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& order);

// ---- experts ----

struct MoEParallel {  // the groups the MoE layer runs over (null or size 1: none)
  std::shared_ptr<dist::ProcessGroup> ep = nullptr;  // expert-parallel group
  std::shared_ptr<dist::ProcessGroup> tp = nullptr;  // tensor-parallel group (experts split over it: ETP = TP)
};

// Where a module sits in the expert- and tensor-parallel grid.
struct ExpertLayout {
  int64_t ep_rank = 0, ep_size = 1, tp_rank = 0, tp_size = 1;
};

// This rank's routed experts, each an MLP of width moe_ffn_hidden_size
// (Megatron's GroupedMLP with --moe-grouped-gemm: one grouped GEMM per
// projection over every local expert; else SequentialMLP: a loop of
// per-expert linear calls). Under tensor parallelism each expert holds
// fc1 rows (gate and up halves alike) and fc2 columns; its output is partial.
class ExpertsImpl : public nn::Module {
 public:
  ExpertsImpl(const TransformerConfig& config, ExpertLayout layout = {});
  // x [R, C] sorted by local expert, rows[l] rows for local expert l -> [R, C].
  Tensor forward(const Tensor& x, const std::vector<int64_t>& rows);

  int64_t num_local_experts() const { return static_cast<int64_t>(fc1_weight.size()); }
  int64_t first_expert() const { return first_expert_; }  // global index of local expert 0
  // Per local expert (biases undefined without add_bias_linear).
  std::vector<Tensor> fc1_weight, fc1_bias, fc2_weight, fc2_bias;

 private:
  int64_t first_expert_ = 0;
  bool grouped_gemm_, gated_;
  Activation activation_;
  ExpertLayout layout_;
};
QK_MODULE(Experts);

// The shared experts (Megatron's SharedExpertMLP): an MLP of width
// moe_shared_expert_intermediate_size every token passes through, split over
// TP as the experts are (its output partial there).
class SharedExpertsImpl : public nn::Module {
 public:
  SharedExpertsImpl(const TransformerConfig& config, ExpertLayout layout = {});
  Tensor forward(const Tensor& x);  // [N, C] -> [N, C]

  Tensor fc1_weight, fc1_bias, fc2_weight, fc2_bias;

 private:
  bool gated_;
  Activation activation_;
  ExpertLayout layout_;
};
QK_MODULE(SharedExperts);

// ---- the layer ----

// The last forward's statistics, for logs (Megatron's per-layer MoE logging).
struct MoELayerStats {
  // Routes kept per global expert and routes the capacity dropped, over the
  // tokens of every rank of the expert-parallel group.
  std::vector<int64_t> tokens_per_expert;
  int64_t dropped_routes = 0;
  // Zero rows this rank's experts computed (--moe-pad-expert-input-to-capacity).
  int64_t padding_rows = 0;
  // This rank's router's loss values, already times their coefficients.
  double load_balancing_loss = 0, z_loss = 0, device_level_aux_loss = 0, comm_aux_loss = 0;
};

class TokenDispatcher;  // src/transformer/moe/token_dispatcher.h

// Megatron-core's MoELayer: router -> token dispatcher (allgather or
// alltoall over the expert-parallel group) -> experts -> combine, plus the
// shared experts. With --moe-shared-expert-overlap the shared experts run
// while the dispatcher's all-to-all is in flight.
class MoELayerImpl : public MlpBase, public parallel::TensorParallelModule {
 public:
  MoELayerImpl(const TransformerConfig& config, int64_t layer_number, MoEParallel groups = {});
  ~MoELayerImpl() override;
  // [B, T, C], or [B, T/tp, C] under sequence parallelism -> the same.
  Tensor forward(const Tensor& hidden) override;
  const MoELayerStats& last_stats() const { return stats_; }

  // Expert and shared-expert weight shards (fc1 along rows, stride 2 for a
  // gated unit; fc2 along columns).
  std::vector<std::pair<std::string, parallel::ShardSpec>> shard_specs() const override;
  // The fc2 biases under TP: added on TP rank 0 only, so their gradients are
  // summed over the group.
  std::vector<std::string> partial_gradient_parameters() const override;

  TopKRouter router{nullptr};
  Experts experts{nullptr};
  SharedExperts shared_experts{nullptr};  // null without shared experts

 private:
  TransformerConfig config_;
  MoEParallel groups_;
  ExpertLayout layout_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  MoELayerStats stats_;
};
QK_MODULE(MoELayer);

// ---- models with MoE layers ----

// `spec` with an MoELayer over `groups` as the MLP of every layer where
// config.is_moe_layer(layer_number) (Megatron's decoder block spec with
// --moe-layer-freq), the spec's own MLP elsewhere.
TransformerLayerSpec with_moe_layers(TransformerLayerSpec spec, MoEParallel groups);
// The MoE layers of a model (any module tree), in registration order (layer
// order): for the trainer's aux-loss scale, expert-bias updates and logs.
//   for (MoELayerImpl* m : moe_layers(*model)) m->router->set_aux_loss_backward_scale(s);
std::vector<MoELayerImpl*> moe_layers(nn::Module& model);

// Whether a parameter name is a routed expert's ("...experts.local_experts..."):
// its gradient is reduced over the expert-data-parallel group, not the
// data-parallel one. Shared experts and the router are dense parameters.
bool is_expert_parameter(std::string_view name);

}  // namespace qk::transformer

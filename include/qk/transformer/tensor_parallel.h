// The transformer's tensor-parallel layers (Megatron-core's TP layer spec):
// self-attention split by heads and query groups, the MLP split by its
// width, over a tensor-parallel group passed in. GPTModel takes the group
// too (qk/transformer/gpt_model.h) and builds the whole model from them:
//
//   auto ps = qk::parallel::ParallelState::create(qk::dist::group(), sizes);
//   config.tensor_model_parallel_size = ps->tensor_model_parallel_size();
//   config.sequence_parallel = true;                                   // optional (--sequence-parallel)
//   qk::manual_seed(1234);                                             // same seed on every rank
//   GPTModel model(config, ps->group(qk::parallel::GroupKind::tp));
//   Tensor loss = model(tokens, {}, labels, loss_mask);                // the same on every TP rank
//   loss.backward();
//   qk::parallel::all_reduce_partial_gradients(*model, *tp);           // q/k norms; SP norms and biases
//
// Each rank holds num_query_groups/tp whole groups of the fused QKV weight
// (rows [g (Hq/G + 2) D ...] of Megatron's grouped layout, so a contiguous
// row block) and the matching columns of linear_proj; linear_fc1 with a
// gated unit holds matching rows of the gate and the up halves (partition
// stride 2). The weights put together are the unsplit model's with the same
// seed (Megatron's --use-cpu-initialization), and state dicts gather and
// scatter by name (qk/parallel/sharding.h).
#pragma once

#include <memory>

#include "qk/dist/process_group.h"
#include "qk/parallel/layers.h"
#include "qk/transformer/layers.h"

namespace qk::transformer {

// Whether `config` splits over `tp` ranks: ValueError naming the flags
// (--num-attention-heads, --num-query-groups, --ffn-hidden-size against
// --tensor-model-parallel-size), and that config.tensor_model_parallel_size is tp.
void check_tensor_parallel_config(const TransformerConfig& config, int64_t tp);

// SelfAttention with linear_qkv column-parallel (this rank's query groups)
// and linear_proj row-parallel (input_is_parallel); the core attention runs
// on this rank's heads. Parameter names are SelfAttention's.
class ParallelSelfAttentionImpl : public SelfAttentionBase, public parallel::TensorParallelModule {
 public:
  ParallelSelfAttentionImpl(const TransformerConfig& config, int64_t layer_number,
                            std::shared_ptr<dist::ProcessGroup> tp);
  // hidden [B, T, C], or [B, T/tp, C] under sequence parallelism (the output too).
  Tensor forward(const Tensor& hidden, const AttentionContext& ctx) override;
  std::vector<std::pair<std::string, parallel::ShardSpec>> shard_specs() const override { return {}; }
  // The q/k layer norms: each rank normalises only its heads.
  std::vector<std::string> partial_gradient_parameters() const override;

  parallel::RowParallelLinear linear_proj{nullptr};
  parallel::ColumnParallelLinear linear_qkv{nullptr};
  Norm q_layernorm{nullptr}, k_layernorm{nullptr};

 private:
  TransformerConfig config_;
  int64_t local_groups_;
  std::shared_ptr<dist::ProcessGroup> tp_;
};
QK_MODULE(ParallelSelfAttention);

// Mlp with linear_fc1 column-parallel (stride 2 for a gated unit: matching
// gate/up rows) and linear_fc2 row-parallel.
class ParallelMlpImpl : public MlpBase {
 public:
  ParallelMlpImpl(const TransformerConfig& config, int64_t layer_number, std::shared_ptr<dist::ProcessGroup> tp);
  Tensor forward(const Tensor& hidden) override;

  parallel::ColumnParallelLinear linear_fc1{nullptr};
  parallel::RowParallelLinear linear_fc2{nullptr};

 private:
  Activation activation_;
  bool gated_;
};
QK_MODULE(ParallelMlp);

// ParallelSelfAttention and ParallelMlp over `tp` (sequence parallelism as
// the config they are built from says).
TransformerLayerSpec gpt_layer_tensor_parallel_spec(std::shared_ptr<dist::ProcessGroup> tp);

}  // namespace qk::transformer

// Megatron's tensor-parallel layers (megatron/core/tensor_parallel/layers.py)
// as nn::Modules holding this rank's shard, over a tensor-parallel group
// passed in (never a global).
//
//   auto tp = ps->group(qk::parallel::GroupKind::tp);
//   ColumnParallelLinear fc1(1024, 4096, tp);                 // weight [4096/tp, 1024]
//   RowParallelLinear fc2(4096, 1024, tp, RowParallelLinearOptions().input_is_parallel(true));
//   Tensor y = fc2(gelu(fc1(x)));                             // x, y [.., 1024] on every rank
//
//   VocabParallelEmbedding emb(50304, 1024, tp);              // rows [r*V/tp, (r+1)*V/tp)
//   Tensor h = emb(tokens);                                   // [B, T, 1024], all-reduced
//
// Initialisation follows Megatron's --use-cpu-initialization: every rank
// builds the FULL master weight with the same generator draws an unsplit
// layer would make (nn::Linear's / nn::Embedding's default init, then the
// options' init on the full tensor) and keeps its slice. With the same seed,
// the shards of a tensor-parallel layer put together are the unsplit layer's
// weights, at any tensor-parallel size.
//
// Sequence parallelism: a column-parallel layer then takes its input split
// along the sequence dim and all-gathers it; a row-parallel one reduce-scatters
// its output along it; the row-parallel bias is then a partial-gradient parameter
// (its gradient must be summed over the group: qk/parallel/sharding.h).
#pragma once

#include <functional>
#include <memory>

#include "qk/dist/process_group.h"
#include "qk/nn/arg.h"
#include "qk/nn/module.h"
#include "qk/parallel/sharding.h"

namespace qk::parallel {

// Fills a full master weight (and bias: undefined without one) in place.
using InitMethod = std::function<void(const Tensor& weight, const Tensor& bias)>;

struct ColumnParallelLinearOptions {
  QK_ARG(bool, bias) = true;
  // All-gather the output's last dim so every rank gets [.., out].
  QK_ARG(bool, gather_output) = false;
  // The input is split along sequence_dim: all-gather it (and reduce-scatter
  // its gradient) instead of copying it into the region.
  QK_ARG(bool, sequence_parallel) = false;
  QK_ARG(int64_t, sequence_dim) = 1;
  // Megatron's partition stride: 2 for a fused [gate; up] weight, so each
  // rank holds matching rows of both halves.
  QK_ARG(int64_t, stride) = 1;
  // Applied to the full weight after nn::Linear's default init; null: that init alone.
  QK_ARG(InitMethod, init);
};

// y = x W^T + b with W [out, in] split along out: this rank computes
// out/tp outputs (weight [out/tp, in], bias [out/tp]).
class ColumnParallelLinearImpl : public nn::Module, public TensorParallelModule {
 public:
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, std::shared_ptr<dist::ProcessGroup> tp,
                           ColumnParallelLinearOptions options = {});
  // x [.., in] (or [.., T/tp, ..] under sequence parallelism) -> [.., out/tp], or [.., out] with gather_output.
  Tensor forward(const Tensor& x);
  // The same with another weight shard [out/tp, in] (the tied output layer
  // reads the vocabulary-parallel embedding's shard).
  Tensor forward(const Tensor& x, const Tensor& weight);
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  void pretty_print(std::ostream& os) const override;

  ColumnParallelLinearOptions options;
  int64_t in_features, out_features;  // full sizes
  Tensor weight, bias;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
};
QK_MODULE(ColumnParallelLinear);

struct RowParallelLinearOptions {
  // A full [out] bias on every rank, added once after the reduction.
  QK_ARG(bool, bias) = true;
  // The input is already split along its last dim (a column-parallel output).
  QK_ARG(bool, input_is_parallel) = false;
  // Reduce-scatter the output along sequence_dim instead of all-reducing it.
  QK_ARG(bool, sequence_parallel) = false;
  QK_ARG(int64_t, sequence_dim) = 1;
  QK_ARG(InitMethod, init);
};

// y = x W^T + b with W [out, in] split along in: each rank multiplies its
// slice of the input and the partial products are summed over the group
// (weight [out, in/tp], bias [out] replicated).
class RowParallelLinearImpl : public nn::Module, public TensorParallelModule {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, std::shared_ptr<dist::ProcessGroup> tp,
                        RowParallelLinearOptions options = {});
  // x [.., in/tp] (input_is_parallel) or [.., in] -> [.., out] (or [.., T/tp, ..] under sequence parallelism).
  Tensor forward(const Tensor& x);
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  std::vector<std::string> partial_gradient_parameters() const override;
  void pretty_print(std::ostream& os) const override;

  RowParallelLinearOptions options;
  int64_t in_features, out_features;
  Tensor weight, bias;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
};
QK_MODULE(RowParallelLinear);

struct VocabParallelEmbeddingOptions {
  // Applied to the full table after nn::Embedding's default N(0, 1) init (bias undefined).
  QK_ARG(InitMethod, init);
  // Reduce-scatter the output along sequence_dim (sequence parallelism)
  // instead of all-reducing it (Megatron's reduce_scatter_embeddings).
  QK_ARG(bool, reduce_scatter_embeddings) = false;
  QK_ARG(int64_t, sequence_dim) = 1;
};

// An embedding table [V, C] split by rows: rank r holds ids
// [r * V/tp, (r+1) * V/tp); other ids give zeros here and the sum over the
// group is every id's row.
class VocabParallelEmbeddingImpl : public nn::Module, public TensorParallelModule {
 public:
  VocabParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, std::shared_ptr<dist::ProcessGroup> tp,
                             VocabParallelEmbeddingOptions options = {});
  // ids [..] i64 in [0, V) -> [.., C].
  Tensor forward(const Tensor& ids);
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  void pretty_print(std::ostream& os) const override;

  VocabParallelEmbeddingOptions options;
  int64_t num_embeddings, embedding_dim;
  int64_t vocab_start_index, vocab_end_index;
  Tensor weight;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
};
QK_MODULE(VocabParallelEmbedding);

}  // namespace qk::parallel

// Embedding: a lookup table of num_embeddings rows of embedding_dim.
//
//   qk::nn::Embedding wte(qk::nn::EmbeddingOptions(50257, 768).padding_idx(0));
//   qk::Tensor h = wte(tokens);      // tokens i64 [B, T] -> [B, T, 768]
#pragma once

#include <optional>

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  QK_ARG(int64_t, num_embeddings);
  QK_ARG(int64_t, embedding_dim);
  // The row that stays zero and gets no gradient; negative counts from the end.
  QK_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

// weight [num_embeddings, embedding_dim] ~ N(0, 1), the padding row zeroed.
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;
  Tensor weight;
};
QK_MODULE(Embedding);

}  // namespace qk::nn

// Raw kernels for softmax, losses, dropout and embeddings.
#pragma once

#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"

namespace qk {
// Declared in qk (not qk::ops) so that argument-dependent lookup on a
// Reduction argument does not also find the raw ops::cross_entropy and make
// qk::cross_entropy(x, t, -100, 0.1, ops::Reduction::sum) ambiguous.
enum class Reduction : uint8_t { none, mean, sum };
}  // namespace qk

namespace qk::ops {

using ::qk::Reduction;

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);

// logits [N,C] (or [N,C,d1,...]), target i64 class indices [N] (or [N,d1,...]).
// Mean reduction divides by the number of non-ignored targets, as PyTorch.
struct CrossEntropyResult {
  Tensor loss;         // scalar, or [N,...] for Reduction::none
  Tensor log_probs;    // saved for backward
};
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                 double label_smoothing, Reduction reduction);
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& log_probs,
                              const Tensor& target, int64_t ignore_index, double label_smoothing,
                              Reduction reduction);

// Inverted dropout: keeps each element with probability 1-p and scales it by
// 1/(1-p). Returns (out, mask) where mask holds the scale (0 or 1/(1-p)).
std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, Generator& gen);

// weight [V,D], indices (i32/i64) any shape -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Sums grad rows into [V,D]; rows of padding_idx (if >= 0) get no gradient.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx);

}  // namespace qk::ops

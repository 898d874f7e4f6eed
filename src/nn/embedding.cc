#include "qk/nn/embedding.h"

#include "qk/autograd/functions.h"
#include "qk/nn/init.h"
#include "qk/tensor/ops/view.h"

namespace qk::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : options(o) {
  QK_CHECK(o.num_embeddings() > 0 && o.embedding_dim() > 0,
           "Embedding: expected positive num_embeddings and embedding_dim, got ", o.num_embeddings(),
           " and ", o.embedding_dim());
  if (o.padding_idx()) {
    int64_t p = *o.padding_idx();
    QK_CHECK_INDEX(p >= -o.num_embeddings() && p < o.num_embeddings(), "Embedding: padding_idx ", p,
                   " out of range for ", o.num_embeddings(), " embeddings");
    if (p < 0) options.padding_idx(p + o.num_embeddings());
  }
  weight = register_parameter("weight", empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) init::zeros_(ops::select(weight, 0, *options.padding_idx()));
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return qk::embedding(weight, indices, options.padding_idx().value_or(-1));
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << options.num_embeddings()
     << ", embedding_dim=" << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

}  // namespace qk::nn

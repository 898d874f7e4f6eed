// The parameters a GPT model holds (GPTModel, the tensor-parallel GPTModel,
// build_gpt_model_chunks), counted from its config without building it: one
// decoder layer, the embedding, the output side, and what one rank of a
// tensor x pipeline x expert split holds. The theoretical memory line of
// `qk pretrain-gpt` and `qk sim` count with it; tests build the models and
// compare with their numel.
//
//   qk::transformer::TransformerConfig c = ...;        // tensor_model_parallel_size = 8
//   c.validate();
//   qk::transformer::ParamScope s;
//   s.first_layer = 1;  s.num_layers = 16;             // pipeline stage 0 of 8, 128 layers
//   s.embedding = true;  s.output = false;  s.pipeline_size = 8;
//   qk::transformer::ParamCount n = qk::transformer::num_parameters(c, s);
//   n.dense;  n.expert;                                // this rank's share of each
//
// Sharding follows the model: column-parallel weights and biases (linear_qkv,
// linear_fc1, the query/key-value up projections of multi-latent attention,
// the vocabulary) are divided by the tensor size; row-parallel weights
// (linear_proj, linear_fc2) too, their biases not; norms, the router, the
// learned position table and the low-rank down projections are whole on
// every rank. Routed experts are divided over the expert-parallel ranks (and
// each over the tensor size).
#pragma once

#include <cstdint>

#include "qk/transformer/config.h"

namespace qk::transformer {

struct ParamCount {
  int64_t dense = 0;   // everything but the routed experts (reduced over data-parallel ranks)
  int64_t expert = 0;  // routed experts (reduced over expert-data-parallel ranks)
  int64_t total() const { return dense + expert; }
  ParamCount& operator+=(const ParamCount& o) {
    dense += o.dense;
    expert += o.expert;
    return *this;
  }
};

// What one rank holds of the model.
struct ParamScope {
  int64_t first_layer = 1;   // global layer number (from 1) of the first decoder layer held
  int64_t num_layers = -1;   // decoder layers held (-1: all from first_layer to the last)
  bool embedding = true;     // the first stage: word (and learned position) embeddings
  bool output = true;        // the last stage: final norm, and the output layer or the tied copy
  int64_t pipeline_size = 1; // > 1 with a tied output layer: the last stage holds a copy of the embedding
};

// One decoder layer (layer_number from 1) on one tensor-parallel rank of
// c.tensor_model_parallel_size, with the experts of one expert-parallel rank.
ParamCount layer_num_parameters(const TransformerConfig& c, int64_t layer_number);
// The word embedding rows of one tensor-parallel rank plus the learned positions.
int64_t embedding_num_parameters(const TransformerConfig& c);
// The final norm and (untied, or tied with pipeline_size > 1) the output layer's rows.
int64_t output_num_parameters(const TransformerConfig& c, int64_t pipeline_size = 1);
// The sum over `s`. c must be validated.
ParamCount num_parameters(const TransformerConfig& c, const ParamScope& s = {});

}  // namespace qk::transformer

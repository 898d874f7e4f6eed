// The memory formulas of GPT pre-training, from the arguments alone: the
// weights and optimizer state behind `qk pretrain-gpt`'s "Theoretical memory
// footprints" line (Megatron's report_theoretical_memory), and the
// activations a micro-batch keeps per layer for its backward (Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// Table 2, generalised to GQA, any FFN width, gated MLPs, flash attention and
// dropout off). `qk sim` predicts memory with the same functions.
//
//   auto dt = qk::recipes::gpt_memory_dtypes(args);              // bf16 weights, f32 gradients
//   qk::optim::OptimizerMemory m = qk::recipes::gpt_weight_and_optimizer_memory(
//       args, /*num_parameters=*/n, dt, /*data_parallel_size=*/8, args.use_distributed_optimizer);
//   qk::recipes::GptActivationBytes act = qk::recipes::gpt_activation_bytes(args, cfg);
//   act.per_layer;                                               // bytes per layer and micro-batch
#pragma once

#include <cstdint>

#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/recipes/megatron_args.h"
#include "qk/tensor/dtype.h"
#include "qk/transformer/config.h"

namespace qk::recipes {

// Parameters as --bf16 / --fp16 make them (f32 otherwise); gradients in f32
// where --accumulate-allreduce-grads-in-fp32 (Megatron's default with bf16)
// or f32 parameters, else in the parameters' dtype.
struct GptMemoryDtypes {
  DType params = DType::f32;
  DType grads = DType::f32;
};
GptMemoryDtypes gpt_memory_dtypes(const MegatronArgs& a);

// The optimizer's state tensors per parameter: Adam's exp_avg and exp_avg_sq;
// SGD's momentum buffer when it has momentum.
int optimizer_state_tensors_per_parameter(const MegatronArgs& a);

// Weights and gradients whole, fp32 main weights and the optimizer's state
// (Adam: 2 tensors; SGD: its momentum buffer when it has momentum) divided
// over data_parallel_size ranks with the distributed optimizer.
optim::OptimizerMemory gpt_weight_and_optimizer_memory(const MegatronArgs& a, int64_t num_parameters,
                                                       GptMemoryDtypes dtypes, int64_t data_parallel_size,
                                                       bool distributed_optimizer);

// Activation bytes one micro-batch keeps on one tensor-parallel rank until
// its backward, with the recompute, sequence-parallel, flash-attention and
// dropout settings of `a` (config: its validated model).
struct GptActivationBytes {
  double per_layer = 0;     // one decoder layer (full recompute: its input only)
  double recompute_peak = 0;  // full recompute: one layer's activations, re-made during its backward
  double embedding = 0;     // the first stage: token ids and the embedding's dropout mask / output
  double output = 0;        // the last stage: final norm input, logits (fp32) for the loss
};
GptActivationBytes gpt_activation_bytes(const MegatronArgs& a, const transformer::TransformerConfig& config);

}  // namespace qk::recipes

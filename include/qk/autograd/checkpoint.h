// Activation checkpointing (torch.utils.checkpoint, Megatron's
// tensor_parallel.checkpoint): run a region's forward without keeping its
// activations, and re-run it during backward to get them back.
//
//   using qk::autograd::checkpoint;
//   Tensor h = checkpoint([&](const std::vector<Tensor>& in) {
//     return std::vector<Tensor>{layer->forward(in[0], ctx)};    // any differentiable code
//   }, {hidden}, {.generators = {ctx.attention_dropout_generator}})[0];
//   loss(h).backward();            // layer's activations are recomputed here
//
// Forward runs `fn` under no_grad: only the inputs (by reference, not
// copied) and the state of the random generators are kept, plus one
// backward node on the outputs. Its backward puts the generators back to
// where they stood before the forward (the default generator always, and
// the ones listed), re-runs `fn` with gradients on fresh leaves holding the
// inputs' data, under the autocast state the forward saw, then puts the
// generators back where they were and backpropagates through the re-run: the
// inputs' gradients leave the node, every parameter `fn` touched
// accumulates into its .grad (post-accumulate hooks fire, as in the plain
// graph). So dropout masks in the re-run equal the forward's, and gradients
// equal the un-checkpointed ones bit for bit when `fn` is deterministic.
//
// Reentrant in torch's sense: a checkpointed region sees its whole re-run
// graph at once; nested checkpoints work. `fn` must compute the same thing
// twice (same module mode, no in-place writes to its inputs after the
// forward: that is an error at backward). Without grad mode, or when no
// input requires grad, `fn` simply runs.
#pragma once

#include <functional>
#include <vector>

#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"

namespace qk::autograd {

struct CheckpointOptions {
  // Generators besides the default one whose state the re-run restores
  // (e.g. the tensor-parallel dropout generator). Null entries are skipped.
  std::vector<Generator*> generators;
};

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) checkpointed; returns its outputs.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});

}  // namespace qk::autograd

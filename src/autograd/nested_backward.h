// A backward pass run from inside another one: what a checkpointed region's
// backward function (checkpoint.cc) does after re-running its forward. Not
// public: reentrant backward is otherwise refused (engine.cc).
#pragma once

#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::autograd {

// Runs the graph above `outputs` seeded with `grad_outputs` (pairs with an
// undefined gradient or no graph are skipped). Gradients reaching `inputs`
// (leaves made for the re-run) are returned, in order, undefined where none
// arrived; every other leaf (the parameters) accumulates into .grad and runs
// its post-accumulate hooks, and callbacks they queue run when the outer
// backward ends. Only inside a running backward.
std::vector<Tensor> nested_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                                    const std::vector<Tensor>& inputs);

}  // namespace qk::autograd

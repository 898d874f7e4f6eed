// Reverse-mode automatic differentiation over qk::Tensor (a tape of Nodes).
//
// Writing a differentiable function (see src/autograd/functions_*.cc):
//
//   Tensor mul(const Tensor& a, const Tensor& b) {
//     Tensor out = ops::mul(a, b);
//     autograd::record("MulBackward", {a, b}, {out},
//         [a, b](const std::vector<Tensor>& g) -> std::vector<Tensor> {
//           return {ops::sum_to(ops::mul(g[0], b), a.shape()),
//                   ops::sum_to(ops::mul(g[0], a), b.shape())};
//         });
//     return out;
//   }
//
// record() does nothing when grad mode is off or no input requires grad, so
// the capture (the saved tensors) costs nothing in inference. Backward
// closures run with grad mode off and use raw ops; they get one gradient per
// output (zeros where none flowed) and return one per input (an undefined
// Tensor means "no gradient"). The engine frees the closures after backward
// unless retain_graph is set.
//
// Note [Node order]: ready nodes run in decreasing creation order, so the
// leaves' gradients become ready roughly in reverse order of use: the order
// DDP's buckets are laid out in.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::autograd {

class Node;

// Where a gradient goes: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node {
 public:
  virtual ~Node() = default;
  // Gradients w.r.t. each output -> gradients w.r.t. each input (next_edges order).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors once backward has passed (retain_graph=false).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<Shape> output_shapes;  // to materialise zero gradients
  std::vector<DType> output_dtypes;
  std::vector<Device> output_devices;
  uint64_t sequence_nr = 0;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

// ---- grad mode ----
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

// Disables graph recording in a scope (inference, optimizer steps).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(true); }
  ~EnableGradGuard() { set_grad_mode(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// ---- recording ----
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// Attaches a backward closure to `outputs` if needs_grad(inputs). Outputs
// must be fresh tensors (not yet part of a graph). Returns whether it did.
bool record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn);
// The edge a gradient for `t` must flow into (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
AutogradMeta* meta(const Tensor& t);            // null when none
AutogradMeta& ensure_meta(const Tensor& t);

// Runs backward from `roots`, seeded with `grads` (same length; undefined
// entries mean ones for scalars).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);
// Queues `fn` to run once the backward now running (on this thread) has
// finished, after every gradient was accumulated, as PyTorch's
// Variable._execution_engine.queue_callback. DDP waits for its last buckets
// here. Throws outside a backward.
void queue_callback(std::function<void()> fn);
bool in_backward();

// Gradients of `outputs` w.r.t. `inputs` without touching .grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

}  // namespace qk::autograd

namespace qk {
using autograd::EnableGradGuard;
using autograd::NoGradGuard;
}  // namespace qk

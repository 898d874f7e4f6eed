// The backward engine: dependency counting, then nodes in decreasing
// creation order (Note [Node order] in autograd.h).
#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "qk/autograd/autograd.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"
#include "nested_backward.h"
#include "tensor_hooks.h"

namespace qk::autograd {

namespace {

thread_local bool t_grad_mode = true;
std::atomic<uint64_t> g_sequence{0};

// A closure recorded by record().
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    QK_CHECK(fn_ != nullptr, "trying to run backward through ", name_,
             " a second time: its saved tensors were freed after the first backward; pass "
             "retain_graph=true to the first backward if you need to");
    return fn_(grads);
  }
  std::string name() const override { return name_; }
  void release_saved() override { fn_ = nullptr; }

 private:
  const char* name_;
  BackwardFn fn_;
};

// The sink of a leaf: adds the incoming gradient into .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    // Run as soon as ready: gradient-ready hooks should fire early (DDP).
    sequence_nr = UINT64_MAX;
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor leaf(leaf_);
    AutogradMeta& m = ensure_meta(leaf);
    Tensor& g = grads[0];
    if (!g.defined()) return {};
    QK_INTERNAL_ASSERT(g.shape() == leaf.shape(), "gradient of shape ", shape_str(g.shape()),
                       " for a leaf of shape ", shape_str(leaf.shape()));
    if (g.dtype() != leaf.dtype()) g = ops::cast(g, leaf.dtype());
    if (!m.grad.defined()) {
      // Adopt the gradient when nobody else holds it; otherwise copy, so that
      // later in-place accumulation cannot write into another tensor.
      bool sole = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
      m.grad = sole ? g : ops::clone(g);
    } else {
      ops::add_(m.grad, g);
    }
    for (auto& hook : m.post_accumulate_hooks) hook(leaf);
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

AutogradMeta* meta(const Tensor& t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

AutogradMeta& ensure_meta(const Tensor& t) {
  QK_CHECK(t.defined(), "autograd: undefined tensor");
  auto& m = t.impl()->autograd;
  if (!m) {
    install_tensor_hooks();  // a tensor with autograd state must never meet the raw ops
    m = std::make_shared<AutogradMeta>();
  }
  return *m;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (m == nullptr || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  auto acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

// Reads the meta directly: Tensor::requires_grad() would go through the hooks.
bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!t_grad_mode) return false;
  for (const auto& t : inputs)
    if (const AutogradMeta* m = meta(t); m != nullptr && m->requires_grad) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const auto& t : inputs)
    if (const AutogradMeta* m = meta(t); m != nullptr && m->requires_grad) return true;
  return false;
}

bool record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn) {
  if (!needs_grad(inputs)) return false;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->sequence_nr = g_sequence.fetch_add(1);
  node->next_edges.reserve(inputs.size());
  for (const auto& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->output_shapes.push_back(o.defined() ? o.shape() : Shape{});
    node->output_dtypes.push_back(o.defined() ? o.dtype() : DType::f32);
    node->output_devices.push_back(o.defined() ? o.device() : kCPU);
    if (!o.defined() || !is_floating(o.dtype())) continue;
    AutogradMeta& m = ensure_meta(o);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = i;
  }
  return true;
}

// ---------------------------------------------------------------------------

namespace {

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Runs the graph above `roots`. With `capture` set, gradients reaching those
// edges are returned instead of accumulated into leaves.
std::unordered_map<const Node*, std::vector<Tensor>> run_backward(
    const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
    const std::unordered_set<const Node*>* capture) {
  NoGradGuard no_grad;
  // 1. Dependencies: how many edges point at each node.
  std::unordered_map<const Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<const Node*> seen;
  for (const auto& e : roots) {
    if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (capture && capture->count(n)) continue;
    for (const auto& e : n->next_edges) {
      if (!e.valid()) continue;
      deps[e.fn.get()]++;
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  // 2. Input buffers, seeded with the root gradients.
  std::unordered_map<const Node*, std::vector<Tensor>> buffers;
  std::unordered_map<const Node*, std::shared_ptr<Node>> owners;
  auto add_grad = [&](const Edge& e, const Tensor& g) {
    auto& buf = buffers[e.fn.get()];
    owners[e.fn.get()] = e.fn;
    size_t n = std::max<size_t>(e.fn->output_shapes.size(), e.input_nr + 1);
    if (buf.size() < n) buf.resize(n);
    Tensor& slot = buf[e.input_nr];
    if (!slot.defined()) slot = g;
    else slot = ops::add(slot, g);
  };
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].valid()) continue;
    add_grad(roots[i], root_grads[i]);
  }
  for (const auto& e : roots)
    if (e.valid() && deps[e.fn.get()] == 0 && buffers.count(e.fn.get())) {
      ready.push(e.fn.get());
      deps[e.fn.get()] = -1;  // queued
    }
  std::unordered_map<const Node*, std::vector<Tensor>> captured;
  std::vector<Node*> done;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[n]);
    buffers.erase(n);
    if (capture && capture->count(n)) {
      captured[n] = std::move(grads);
      continue;
    }
    // Zeros where no gradient flowed into an output of a multi-output node.
    grads.resize(std::max(grads.size(), n->output_shapes.size()));
    bool any = false;
    for (auto& g : grads) any = any || g.defined();
    for (size_t i = 0; any && i < n->output_shapes.size(); ++i)
      if (!grads[i].defined() && is_floating(n->output_dtypes[i]))
        grads[i] = zeros(n->output_shapes[i], TensorOptions(n->output_dtypes[i]).device(n->output_devices[i]));
    std::vector<Tensor> in_grads = any ? n->apply(std::move(grads)) : std::vector<Tensor>{};
    done.push_back(n);
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      if (i < in_grads.size() && in_grads[i].defined()) add_grad(e, in_grads[i]);
      if (--deps[e.fn.get()] == 0 && buffers.count(e.fn.get())) ready.push(e.fn.get());
      else if (deps[e.fn.get()] == 0) {
        // Nothing flowed into it: its inputs get nothing either, but their
        // dependency counts must still drop.
        buffers[e.fn.get()] = {};
        owners[e.fn.get()] = e.fn;
        ready.push(e.fn.get());
      }
    }
  }
  if (!retain_graph)
    for (Node* n : done) n->release_saved();
  return captured;
}

}  // namespace

namespace {
// Callbacks of the backward running on this thread (null when none runs).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// Runs run_backward, then the callbacks queued during it (also those a
// callback queues), in order.
template <typename F>
auto with_callbacks(F&& run) {
  QK_CHECK(t_callbacks == nullptr,
           "backward: called from inside another backward (a hook or callback); reentrant "
           "backward is not supported");
  std::vector<std::function<void()>> callbacks;
  t_callbacks = &callbacks;
  struct Reset {
    ~Reset() { t_callbacks = nullptr; }
  } reset;
  auto result = run();
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);
    fn();
  }
  return result;
}
}  // namespace

void queue_callback(std::function<void()> fn) {
  QK_CHECK(t_callbacks != nullptr,
           "queue_callback: no backward is running on this thread; call it from a gradient hook");
  t_callbacks->push_back(std::move(fn));
}

bool in_backward() { return t_callbacks != nullptr; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  QK_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " outputs but ", grads.size(),
           " gradients");
  std::vector<Edge> edges;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    QK_CHECK(r.requires_grad(), "backward: tensor ", i, " of shape ", shape_str(r.shape()),
             " does not require grad and has no grad_fn; did you call requires_grad_() on the "
             "parameters, or run the forward under no_grad?");
    Tensor g = grads[i];
    if (!g.defined()) {
      QK_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for scalar outputs; "
               "the output has shape ", shape_str(r.shape()), ", so pass a gradient of that shape");
      g = ones(r.shape(), TensorOptions().dtype(r.dtype()).device(r.device()));
    } else {
      QK_CHECK(g.shape() == r.shape(), "backward: gradient of shape ", shape_str(g.shape()),
               " for an output of shape ", shape_str(r.shape()));
    }
    edges.push_back(gradient_edge(r));
    seeds.push_back(g);
  }
  with_callbacks([&] { return run_backward(edges, seeds, retain_graph, nullptr); });
}

std::vector<Tensor> nested_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                                    const std::vector<Tensor>& inputs) {
  QK_CHECK(t_callbacks != nullptr, "nested_backward: only inside a running backward (a node's backward function)");
  QK_CHECK(outputs.size() == grad_outputs.size(), "nested_backward: ", outputs.size(), " outputs but ",
           grad_outputs.size(), " gradients");
  std::vector<Edge> edges;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !grad_outputs[i].defined()) continue;
    Edge e = gradient_edge(outputs[i]);
    if (!e.valid()) continue;
    edges.push_back(std::move(e));
    seeds.push_back(grad_outputs[i]);
  }
  std::unordered_set<const Node*> capture;
  std::vector<Edge> in_edges;
  for (const auto& t : inputs) {
    in_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
    if (in_edges.back().valid()) capture.insert(in_edges.back().fn.get());
  }
  // Callbacks queued by hooks in here join the outer backward's list.
  auto captured = run_backward(edges, seeds, /*retain_graph=*/false, &capture);
  std::vector<Tensor> out;
  for (const auto& e : in_edges) {
    auto it = e.valid() ? captured.find(e.fn.get()) : captured.end();
    out.push_back(it != captured.end() && e.input_nr < it->second.size() ? it->second[e.input_nr] : Tensor());
  }
  return out;
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  std::vector<Edge> edges;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& r = outputs[i];
    QK_CHECK(r.requires_grad(), "grad: output ", i, " does not require grad");
    Tensor g = i < grad_outputs.size() ? grad_outputs[i] : Tensor();
    if (!g.defined()) {
      QK_CHECK(r.numel() == 1, "grad: pass grad_outputs for non-scalar output of shape ",
               shape_str(r.shape()));
      g = ones(r.shape(), TensorOptions().dtype(r.dtype()).device(r.device()));
    }
    edges.push_back(gradient_edge(r));
    seeds.push_back(g);
  }
  std::unordered_set<const Node*> capture;
  std::vector<Edge> in_edges;
  for (const auto& t : inputs) {
    QK_CHECK(t.requires_grad(), "grad: an input does not require grad");
    in_edges.push_back(gradient_edge(t));
    capture.insert(in_edges.back().fn.get());
  }
  auto captured = with_callbacks([&] { return run_backward(edges, seeds, retain_graph, &capture); });
  std::vector<Tensor> out;
  for (const auto& e : in_edges) {
    auto it = captured.find(e.fn.get());
    out.push_back(it != captured.end() && e.input_nr < it->second.size() ? it->second[e.input_nr]
                                                                          : Tensor());
  }
  return out;
}

}  // namespace qk::autograd

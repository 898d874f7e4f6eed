// checkpoint(): forward without saved activations, re-run in backward.
#include "qk/autograd/checkpoint.h"

#include <optional>
#include <utility>

#include "nested_backward.h"
#include "qk/autograd/autocast.h"
#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::autograd {

namespace {

struct GeneratorState {
  Generator* gen;
  uint64_t seed, offset;
};

std::vector<GeneratorState> snapshot(const std::vector<Generator*>& gens) {
  std::vector<GeneratorState> out;
  for (Generator* g : gens) out.push_back({g, g->seed(), g->offset()});
  return out;
}

void restore(const std::vector<GeneratorState>& states) {
  for (const GeneratorState& s : states) s.gen->set_state(s.seed, s.offset);
}

// What the backward node keeps: the inputs (aliases), their versions, the
// generators' and autocast's state at the forward.
struct Saved {
  CheckpointFunction fn;
  std::vector<Tensor> inputs;
  std::vector<uint64_t> versions;
  std::vector<char> wants_grad;
  std::vector<GeneratorState> rng;
  bool autocast_on = false;
  DType autocast_dtype = DType::bf16;
};

std::vector<Tensor> rerun_and_backprop(const Saved& s, const std::vector<Tensor>& grad_outputs) {
  for (size_t i = 0; i < s.inputs.size(); ++i)
    QK_CHECK(!s.inputs[i].defined() || s.inputs[i].impl()->version == s.versions[i], "checkpoint: input ", i,
             " of a checkpointed region was modified in place after its forward; the re-run in backward would "
             "see other values. Pass a copy, or do not checkpoint this region");
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    Tensor leaf = s.inputs[i].defined() ? s.inputs[i].detach() : Tensor();
    if (s.wants_grad[i]) leaf.requires_grad_(true);
    leaves.push_back(std::move(leaf));
  }
  std::vector<Generator*> gens;
  for (const GeneratorState& g : s.rng) gens.push_back(g.gen);
  const std::vector<GeneratorState> now = snapshot(gens);
  std::vector<Tensor> outputs;
  {
    restore(s.rng);  // the forward's dropout masks again
    struct Back {
      const std::vector<GeneratorState>& to;
      ~Back() { restore(to); }  // the run goes on from where it was, even on error
    } back{now};
    EnableGradGuard grad_on;
    autocast::Guard amp(s.autocast_dtype, s.autocast_on);
    outputs = s.fn(leaves);
  }
  QK_CHECK(outputs.size() == grad_outputs.size(), "checkpoint: the re-run returned ", outputs.size(),
           " outputs, the forward ", grad_outputs.size(), "; the function must compute the same thing twice");
  std::vector<Tensor> roots, seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !grad_outputs[i].defined() || !outputs[i].requires_grad()) continue;
    roots.push_back(outputs[i]);
    seeds.push_back(grad_outputs[i]);
  }
  std::vector<Tensor> wanted;
  for (size_t i = 0; i < leaves.size(); ++i) wanted.push_back(s.wants_grad[i] ? leaves[i] : Tensor());
  return nested_backward(roots, seeds, wanted);
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  QK_CHECK(static_cast<bool>(fn), "checkpoint: no function");
  if (!needs_grad(inputs)) return fn(inputs);
  auto saved = std::make_shared<Saved>();
  saved->fn = fn;
  std::vector<Generator*> gens{&default_generator()};
  for (Generator* g : options.generators)
    if (g != nullptr && g != gens.front()) gens.push_back(g);
  saved->rng = snapshot(gens);
  saved->autocast_on = autocast::is_enabled();
  if (saved->autocast_on) saved->autocast_dtype = autocast::low_dtype();
  for (const Tensor& t : inputs) {
    saved->inputs.push_back(t);
    saved->versions.push_back(t.defined() ? t.impl()->version : 0);
    saved->wants_grad.push_back(t.defined() && is_floating(t.dtype()) && t.requires_grad());
  }
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
    // An input handed back as is would get this node as its grad_fn: give out a copy.
    for (Tensor& o : outputs)
      for (const Tensor& in : inputs)
        if (o.defined() && in.defined() && o.is_same(in)) o = ops::clone(o);
  }
  record("CheckpointBackward", inputs, outputs,
         [saved](const std::vector<Tensor>& grads) { return rerun_and_backprop(*saved, grads); });
  return outputs;
}

}  // namespace qk::autograd

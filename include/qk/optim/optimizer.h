// Optimizers: the base class with parameter groups and resumable state.
//
//   qk::optim::SGD opt(model->parameters(), qk::optim::SGDOptions(0.1).momentum(0.9));
//   for (...) {
//     opt.zero_grad();
//     loss_fn(model->forward(x), y).backward();
//     opt.step();
//   }
//   qk::optim::save(opt, "opt.safetensors");   // later: qk::optim::load(opt, ...)
//
// Parameter groups: each group has its own options (lr, weight_decay, ...):
//   SGD opt({{backbone->parameters(), SGDOptions(0.01)},
//            {head->parameters(), SGDOptions(0.1).momentum(0.9)}});
//
// State (momentum buffers, Adam moments, step counts) is kept per parameter
// in a flat index over all groups, as PyTorch numbers it, so a state dict
// maps onto an optimizer built the same way over the same model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::optim {

// Everything needed to resume: per-parameter tensors ("state.3.exp_avg"),
// per-parameter and per-group scalars ("state.3.step", "param_groups.0.lr").
struct OptimizerState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Drops the gradients (set_to_none) or zeroes them in place.
  void zero_grad(bool set_to_none = true);

  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  // Every parameter, group by group.
  std::vector<Tensor> all_params() const;
  // The learning rate of a group; LR schedulers call set_lr.
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // A group's weight decay; Megatron-style schedules anneal it per step.
  virtual double weight_decay(size_t group) const = 0;
  virtual void set_weight_decay(size_t group, double wd) = 0;

  OptimizerState state_dict() const;
  // Restores a state from an optimizer built over the same parameters (the
  // same group sizes and shapes); throws ValueError naming the mismatch.
  void load_state_dict(const OptimizerState& state);

  // Per-parameter state of the built-in optimizers.
  struct ParamState {
    std::map<std::string, Tensor> tensors;  // "momentum_buffer", "exp_avg", ...
    int64_t step = 0;
  };
  // The gradient of p made ready for a fused kernel: contiguous, p's dtype
  // and device, checked against p's shape. Undefined when p has none.
  static Tensor kernel_grad_for(const Tensor& p, const char* optimizer_name);

 protected:
  Optimizer() = default;
  // Registers a group's parameters (checked: defined, floating leaves).
  void add_params(std::vector<Tensor> params, const char* optimizer_name);
  // A group's hyperparameters as numbers (bools as 0/1), for state_dict.
  virtual std::map<std::string, double> group_hparams(size_t group) const = 0;
  virtual void set_group_hparams(size_t group, const std::map<std::string, double>& h) = 0;
  // State of parameter i of group g (created empty on first use).
  ParamState& state(size_t group, size_t i) { return state_[offsets_[group] + i]; }
  std::vector<std::vector<Tensor>> groups_;
  std::vector<size_t> offsets_;  // flat index of each group's first parameter
  std::vector<ParamState> state_;
};

// Saves/loads an optimizer's state dict as safetensors (scalars go to the
// "__metadata__" map), so checkpoints resume bit-exactly.
void save(const Optimizer& opt, const std::string& path);
void load(Optimizer& opt, const std::string& path);

// Typed options per group, shared by SGD, Adam and AdamW. `Options` has
// lr()/lr(v) and to_map()/from_map() for the state dict.
template <typename Options>
class OptimizerWithOptions : public Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor> params;
    Options options;
  };

  void add_param_group(std::vector<Tensor> params, const Options& options) {
    add_params(std::move(params), Options::kName);
    options_.push_back(options);
  }
  Options& options(size_t group) { return options_.at(group); }
  const Options& options(size_t group) const { return options_.at(group); }
  double lr(size_t group) const override { return options_.at(group).lr(); }
  void set_lr(size_t group, double lr) override { options_.at(group).lr(lr); }
  double weight_decay(size_t group) const override { return options_.at(group).weight_decay(); }
  void set_weight_decay(size_t group, double wd) override { options_.at(group).weight_decay(wd); }

 protected:
  void init_groups(std::vector<ParamGroup> groups) {
    for (auto& g : groups) add_param_group(std::move(g.params), g.options);
  }
  std::map<std::string, double> group_hparams(size_t group) const override {
    return options_.at(group).to_map();
  }
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override {
    options_.at(group).from_map(h);
  }
  std::vector<Options> options_;
};

}  // namespace qk::optim

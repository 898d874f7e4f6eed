// nn::Module: the base of every layer and model, as torch::nn::Module.
//
//   struct NetImpl : qk::nn::Module {
//     NetImpl() {
//       fc1 = register_module("fc1", qk::nn::Linear(784, 128));
//       fc2 = register_module("fc2", qk::nn::Linear(qk::nn::LinearOptions(128, 10).bias(false)));
//     }
//     qk::Tensor forward(const qk::Tensor& x) { return fc2(qk::relu(fc1(x))); }
//     qk::nn::Linear fc1{nullptr}, fc2{nullptr};
//   };
//   QK_MODULE(Net);                          // Net: a shared-pointer holder of NetImpl
//
//   Net net;
//   net->named_parameters();                 // "fc1.weight", "fc1.bias", "fc2.weight"
//   net->eval();  net->to(qk::DType::f64);
//   qk::nn::save(*net, "net.safetensors");   // qk/nn/serialize.h
//
// A module owns named parameters (tensors that require grad), buffers
// (state that is saved but not trained, like BatchNorm's running mean) and
// child modules; the named_* walks visit them depth-first in registration
// order with dotted names. to() converts tensors in place (every handle to a
// parameter, e.g. an Impl's `weight` member, sees the change), as PyTorch's
// set_data does.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "qk/nn/ordered_dict.h"
#include "qk/tensor/tensor.h"

namespace qk::nn {

template <typename Contained>
class ModuleHolder;

using NamedTensors = OrderedDict<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  // `name` overrides the type name shown by printing.
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The type name without "Impl" ("Linear"), or the name given to the constructor.
  std::string name() const;

  // ---- registration ----
  // Stores `t` (detached, then requires_grad set) under `name` and returns
  // it; an undefined tensor registers an absent parameter (bias=false).
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  // Points an existing parameter name at another tensor, as-is (no detach):
  // how weights are tied, e.g. lm_head->replace_parameter("weight", wte->weight)
  // (and lm_head->weight = wte->weight for the member). parameters() then
  // lists the shared tensor once; state_dict() keeps both names, as PyTorch.
  void replace_parameter(const std::string& name, const Tensor& t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from qk::nn::Module");
    add_child(name, m);
    return m;
  }
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, const ModuleHolder<M>& holder) {
    return register_module(name, holder.ptr());
  }

  // ---- traversal (dotted names, registration order; a tensor reached
  // twice, e.g. a tied weight, is listed once under its first name) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::string, std::shared_ptr<Module>> named_children() const;
  // This module (needs to be held by a shared_ptr) and every descendant.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  OrderedDict<std::string, std::shared_ptr<Module>> named_modules(bool include_self = true);

  // ---- mode and bulk operations ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return is_training_; }
  // Calls fn on this module and every descendant (pre-order).
  void apply(const std::function<void(Module&)>& fn);
  void zero_grad(bool set_to_none = true);
  // Moves/converts every parameter and buffer in place (to(dtype) converts
  // floating tensors only, as PyTorch); gradients follow.
  void to(Device device);
  void to(DType dtype);

  // ---- checkpoints ----
  // Parameters then buffers, with dotted names; the tensors share storage with the module.
  NamedTensors state_dict() const;
  // Copies values in under no_grad. strict: every key must match both ways.
  // Shape or dtype mismatches are always errors naming the key and both.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // One line describing this module's configuration, e.g. "Linear(in_features=4, ...)".
  virtual void pretty_print(std::ostream& os) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // `seen` (null: keep duplicates) drops tensors already listed.
  void collect(const std::string& prefix, bool params, bool recurse,
               std::unordered_set<const TensorImpl*>* seen, NamedTensors& out) const;
  void print_tree(std::ostream& os, int indent) const;
  friend std::ostream& operator<<(std::ostream& os, const Module& m);

  std::string name_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  OrderedDict<std::string, std::shared_ptr<Module>> children_;
  bool is_training_ = true;
};

// Prints the module tree, PyTorch-style.
std::ostream& operator<<(std::ostream& os, const Module& m);

// A shared pointer to an Impl with value semantics, as torch's ModuleHolder:
// `Linear(4, 2)` builds a LinearImpl; `->` reaches it; `()` calls forward;
// `Linear fc{nullptr}` is empty until assigned.
template <typename Contained>
class ModuleHolder {
 public:
  using ContainedType = Contained;

  ModuleHolder()
    requires std::is_default_constructible_v<Contained>
      : impl_(std::make_shared<Contained>()) {}
  /* implicit */ ModuleHolder(std::nullptr_t) {}
  /* implicit */ ModuleHolder(std::shared_ptr<Contained> m) : impl_(std::move(m)) {}
  template <typename Head, typename... Tail>
    requires(!std::is_base_of_v<ModuleHolder, std::decay_t<Head>> &&
             !std::is_same_v<std::decay_t<Head>, std::nullptr_t> &&
             !std::is_same_v<std::decay_t<Head>, std::shared_ptr<Contained>> &&
             std::is_constructible_v<Contained, Head, Tail...>)
  explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::make_shared<Contained>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {}

  Contained* operator->() const { return checked(); }
  Contained& operator*() const { return *checked(); }
  Contained* get() const { return impl_.get(); }
  const std::shared_ptr<Contained>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    return checked()->forward(std::forward<Args>(args)...);
  }

 private:
  Contained* checked() const {
    QK_CHECK(impl_ != nullptr, "use of an empty module holder (", typeid(Contained).name(),
             "); assign it (e.g. fc = register_module(\"fc\", Linear(4, 2))) before use");
    return impl_.get();
  }
  std::shared_ptr<Contained> impl_;
};

}  // namespace qk::nn

// Declares `Name` as the holder of `NameImpl`.
#define QK_MODULE(Name)                                              \
  class Name : public ::qk::nn::ModuleHolder<Name##Impl> {           \
   public:                                                           \
    using ::qk::nn::ModuleHolder<Name##Impl>::ModuleHolder;          \
    using Impl = Name##Impl;                                         \
  }

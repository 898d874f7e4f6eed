// Sequential: modules applied in order; ModuleList: modules held in order
// (the caller decides how to run them, e.g. transformer blocks);
// Functional: a function as a module.
//
//   qk::nn::Sequential net(qk::nn::Conv2d(qk::nn::Conv2dOptions(3, 16, 3).padding(1)),
//                          qk::nn::BatchNorm2d(16), qk::nn::ReLU(), qk::nn::MaxPool2d(2),
//                          qk::nn::Flatten(), qk::nn::Linear(16 * 16 * 16, 10));
//   qk::Tensor logits = net(x);
//   net->named_parameters();   // "0.weight", "0.bias", "1.weight", ...
//   net->push_back("head", qk::nn::Linear(10, 2));
//
// Every element of a Sequential must have `Tensor forward(const Tensor&)`.
//
//   qk::nn::ModuleList blocks;
//   for (int i = 0; i < 12; ++i) blocks->push_back(Block(cfg));   // "blocks.0.attn.weight", ...
//   for (size_t i = 0; i < blocks->size(); ++i) h = blocks->ptr<BlockImpl>(i)->forward(h);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qk/nn/module.h"

namespace qk::nn {

class FunctionalImpl : public Module {
 public:
  explicit FunctionalImpl(std::function<Tensor(const Tensor&)> fn);
  Tensor forward(const Tensor& x) { return fn_(x); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};
QK_MODULE(Functional);

class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <typename... Ms>
    requires(sizeof...(Ms) >= 1)
  explicit SequentialImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends under the name "<index>" or the name given.
  template <typename M>
  void push_back(std::shared_ptr<M> m) {
    push_back(std::to_string(modules_.size()), std::move(m));
  }
  template <typename M>
  void push_back(std::string name, std::shared_ptr<M> m) {
    register_module(name, m);
    forwards_.push_back([m](const Tensor& x) { return m->forward(x); });
    modules_.push_back(std::move(m));
  }
  template <typename M>
  void push_back(const ModuleHolder<M>& m) {
    push_back(m.ptr());
  }
  template <typename M>
  void push_back(std::string name, const ModuleHolder<M>& m) {
    push_back(std::move(name), m.ptr());
  }

  Tensor forward(const Tensor& x);
  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& ptr(size_t i) const;
  Module& operator[](size_t i) const { return *ptr(i); }
  // The i-th module as its concrete type (ValueError if it is another).
  template <typename M>
  M& at(size_t i) const {
    auto* m = dynamic_cast<M*>(ptr(i).get());
    QK_CHECK(m != nullptr, "Sequential::at: module ", i, " is a ", ptr(i)->name(),
             ", not the requested type");
    return *m;
  }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  std::vector<std::function<Tensor(const Tensor&)>> forwards_;
};
QK_MODULE(Sequential);

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <typename... Ms>
    requires(sizeof...(Ms) >= 1)
  explicit ModuleListImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // Appends under the name "<index>".
  template <typename M>
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(modules_.size()), m);
    modules_.push_back(std::move(m));
  }
  template <typename M>
  void push_back(const ModuleHolder<M>& m) {
    push_back(m.ptr());
  }
  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& ptr(size_t i) const;
  Module& operator[](size_t i) const { return *ptr(i); }
  // The i-th module as its concrete type (ValueError if it is another).
  template <typename M>
  std::shared_ptr<M> ptr(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>(ptr(i));
    QK_CHECK(m != nullptr, "ModuleList::ptr: module ", i, " is a ", ptr(i)->name(),
             ", not the requested type");
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
QK_MODULE(ModuleList);

}  // namespace qk::nn

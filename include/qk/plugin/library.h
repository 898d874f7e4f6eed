// Declaring extension ops: a Library names a namespace and defines ops in it,
// each with a schema, a kernel per device type and a backward.
//
//   Tensor bias_gelu_cpu(const Tensor& x, const Tensor& bias);      // kernels:
//   Tensor bias_gelu_cuda(const Tensor& x, const Tensor& bias);     // raw, no autograd
//   std::vector<Tensor> bias_gelu_backward(const qk::plugin::BackwardContext& ctx) {
//     return qk::plugin::call_multi("my_ops::bias_gelu_backward",
//                                   {ctx.grad(0), ctx.tensor("x"), ctx.tensor("bias")});
//   }
//   lib.def("bias_gelu(Tensor x, Tensor bias) -> Tensor")
//       .kernel(qk::DeviceType::cpu, bias_gelu_cpu)
//       .kernel(qk::DeviceType::cuda, bias_gelu_cuda)
//       .backward(bias_gelu_backward);
//
// A plugin fills its Library in a QK_EXTENSION block (qk/plugin/extension.h); a
// program can define ops of its own with define_library (qk/plugin/registry.h).
// A typed kernel (a plain function of Tensors, doubles, int64_ts and bools,
// returning a Tensor, a std::tuple of them or a std::vector) is checked
// against the schema when it is registered; a std::function taking the bound
// Values is the untyped form.
//
// Kernels run with grad mode off; the registry records autograd around them.
// A backward gets the call's arguments, the outputs and one gradient per
// output (zeros where none flowed) and returns one gradient per argument, in
// schema order: an undefined Tensor for scalars and for "no gradient".
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "qk/plugin/schema.h"
#include "qk/tensor/device.h"

namespace qk::plugin {

using KernelFn = std::function<std::vector<Tensor>(const std::vector<Value>& args)>;

// What an op's backward sees.
class BackwardContext {
 public:
  BackwardContext(const Schema& schema, const std::vector<Value>& args,
                  const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads)
      : schema_(schema), args_(args), outputs_(outputs), grads_(grads) {}
  // Argument i, or the one named so (ValueError for a name the schema lacks).
  const Value& arg(size_t i) const;
  const Value& arg(std::string_view name) const;
  const Tensor& tensor(size_t i) const { return arg(i).tensor(); }
  const Tensor& tensor(std::string_view name) const { return arg(name).tensor(); }
  // Forward output k (detached) and the gradient flowing into it.
  const Tensor& output(size_t k) const;
  const Tensor& grad(size_t k) const;
  // Whether argument i is a tensor that needs a gradient.
  bool needs_grad(size_t i) const;
  size_t num_args() const { return args_.size(); }

 private:
  const Schema& schema_;
  const std::vector<Value>& args_;
  const std::vector<Tensor>& outputs_;
  const std::vector<Tensor>& grads_;
};

using BackwardFn = std::function<std::vector<Tensor>(const BackwardContext& ctx)>;

// One registered op: what the registry dispatches on.
struct OpDef {
  Schema schema;
  std::string qualified_name;  // "my_ops::fused_bias_gelu"
  std::string backward_name;   // the autograd node's name
  std::array<KernelFn, kNumDeviceTypes> kernels;
  BackwardFn backward;         // empty: calling backward through it is an error
  std::string origin;          // the library file, or "<program>"

  bool has_kernel(DeviceType t) const { return kernels[static_cast<int>(t)] != nullptr; }
  // "cpu, cuda": the device types with a kernel.
  std::string kernel_devices() const;
};

namespace detail {
// Checks a typed kernel's C++ signature against the schema (TypeError
// naming the op, the argument and both types). outputs: -1 for a vector.
void check_kernel_signature(const OpDef& op, std::span<const ArgType> params, int outputs,
                            const char* what);

template <typename T>
constexpr ArgType arg_type_of() {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) return ArgType::tensor;
  else if constexpr (std::is_same_v<D, bool>) return ArgType::bool_;
  else if constexpr (std::is_integral_v<D>) return ArgType::int_;
  else if constexpr (std::is_floating_point_v<D>) return ArgType::float_;
  else static_assert(sizeof(D) == 0, "an op's arguments are Tensor, double, int64_t or bool");
}

template <typename T>
std::remove_cvref_t<T> unbox(const Value& v) {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) return v.tensor();
  else if constexpr (std::is_same_v<D, bool>) return v.to_bool();
  else if constexpr (std::is_integral_v<D>) return static_cast<D>(v.to_int());
  else return static_cast<D>(v.to_double());
}

template <typename R>
struct ResultTraits {
  static_assert(sizeof(R) == 0, "an op returns Tensor, std::tuple<Tensor, ...> or std::vector<Tensor>");
};
template <>
struct ResultTraits<Tensor> {
  static constexpr int count = 1;
  static std::vector<Tensor> box(Tensor t) { return {std::move(t)}; }
};
template <>
struct ResultTraits<std::vector<Tensor>> {
  static constexpr int count = -1;
  static std::vector<Tensor> box(std::vector<Tensor> v) { return v; }
};
template <typename... T>
struct ResultTraits<std::tuple<T...>> {
  static_assert((std::is_same_v<T, Tensor> && ...), "a tuple result holds Tensors only");
  static constexpr int count = sizeof...(T);
  static std::vector<Tensor> box(std::tuple<T...> t) {
    return std::apply([](auto&&... x) { return std::vector<Tensor>{std::move(x)...}; }, std::move(t));
  }
};

template <typename R, typename... A, size_t... I>
std::vector<Tensor> call_unboxed(R (*fn)(A...), const std::vector<Value>& args,
                                 std::index_sequence<I...>) {
  return ResultTraits<R>::box(fn(unbox<A>(args[I])...));
}
}  // namespace detail

class OpBuilder {
 public:
  explicit OpBuilder(OpDef& op) : op_(&op) {}
  // The kernel for a device type (ValueError when it already has one).
  OpBuilder& kernel(DeviceType device, KernelFn fn);
  template <typename R, typename... A>
  OpBuilder& kernel(DeviceType device, R (*fn)(A...)) {
    static constexpr std::array<ArgType, sizeof...(A)> params{detail::arg_type_of<A>()...};
    detail::check_kernel_signature(*op_, params, detail::ResultTraits<R>::count, "kernel");
    return kernel(device, KernelFn([fn](const std::vector<Value>& args) {
                    return detail::call_unboxed(fn, args, std::index_sequence_for<A...>{});
                  }));
  }
  OpBuilder& backward(BackwardFn fn);

 private:
  OpDef* op_;
};

class Library {
 public:
  // ns: an identifier, the prefix of every op's name ("my_ops::...").
  explicit Library(std::string ns);
  // Defines an op (ValueError for a bad schema or a name defined twice).
  OpBuilder def(std::string_view schema);
  const std::string& ns() const { return ns_; }
  std::vector<std::unique_ptr<OpDef>>& ops() { return ops_; }

 private:
  std::string ns_;
  std::vector<std::unique_ptr<OpDef>> ops_;
};

}  // namespace qk::plugin

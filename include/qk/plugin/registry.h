// Loading extension ops and calling them, as torch.ops.load_library and
// torch.ops.my_ops.fused_bias_gelu(x, b):
//
//   qk::plugin::load_library("build/libmy_ops.so");
//   Tensor y = qk::plugin::call("my_ops::fused_bias_gelu", {x, b});
//   // typed: looks the op up once and checks the signature against its schema
//   auto gelu = qk::plugin::typed<Tensor(const Tensor&, const Tensor&)>("my_ops::fused_bias_gelu");
//   Tensor z = gelu(x, b);
//   z.sum().backward();   // through the op's registered backward
//
// QK_EXTENSIONS=lib1.so:lib2.so names libraries `qk` loads at start-up
// (load_extensions_from_env). The program that loads a plugin must export
// qianka's symbols to it: in CMake, qk_enable_extensions(<target>)
// (docs/extensions.md).
//
// Errors: a missing file or unresolved symbol (IoError), a library without a
// QK_EXTENSION entry or built against another qianka (IoError), an op defined
// twice (ValueError, naming both libraries), a call whose values do not match
// the schema (TypeError), an op without a kernel for its tensors' device
// (DeviceError).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "qk/plugin/library.h"

namespace qk::plugin {

struct LoadedLibrary {
  std::string path;
  std::string ns;
  std::vector<std::string> ops;  // qualified names
};

// Loads a plugin and registers its ops; loading the same file again does
// nothing. Returns what it registered.
LoadedLibrary load_library(const std::string& path);
// Loads every library in QK_EXTENSIONS (':'-separated); returns how many.
size_t load_extensions_from_env();
std::vector<LoadedLibrary> loaded_libraries();

// Registers ops defined by the program itself, as a plugin's QK_EXTENSION
// block would (origin names them in errors).
void define_library(const std::string& ns, const std::function<void(Library&)>& init,
                    const std::string& origin = "<program>");

// The op named "ns::name"; ValueError listing the loaded ops when there is none.
const OpDef& find_op(std::string_view qualified_name);
bool has_op(std::string_view qualified_name);
std::vector<const OpDef*> all_ops();  // sorted by name

// Runs an op on the device of its tensors, recording autograd. call()
// wants an op with one output; call_multi returns all of them.
std::vector<Tensor> call_op(const OpDef& op, const std::vector<Value>& args);
Tensor call(std::string_view qualified_name, const std::vector<Value>& args);
std::vector<Tensor> call_multi(std::string_view qualified_name, const std::vector<Value>& args);

template <typename Sig>
class TypedOp;

template <typename R, typename... A>
class TypedOp<R(A...)> {
 public:
  explicit TypedOp(std::string_view qualified_name) : op_(&find_op(qualified_name)) {
    static constexpr std::array<ArgType, sizeof...(A)> params{detail::arg_type_of<A>()...};
    detail::check_kernel_signature(*op_, params, detail::ResultTraits<R>::count, "typed call");
  }
  R operator()(A... args) const {
    std::vector<Tensor> out = call_op(*op_, {Value(args)...});
    if constexpr (std::is_same_v<R, Tensor>) {
      return std::move(out[0]);
    } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
      return out;
    } else {
      return to_tuple(std::move(out), std::make_index_sequence<std::tuple_size_v<R>>{});
    }
  }
  const OpDef& op() const { return *op_; }

 private:
  template <size_t... I>
  static R to_tuple(std::vector<Tensor>&& out, std::index_sequence<I...>) {
    return R{std::move(out[I])...};
  }
  const OpDef* op_;
};

// typed<Tensor(const Tensor&, double)>("ns::op"): the op as a C++ function.
template <typename Sig>
TypedOp<Sig> typed(std::string_view qualified_name) {
  return TypedOp<Sig>(qualified_name);
}

}  // namespace qk::plugin

// The signature of an extension op, written as PyTorch's TORCH_LIBRARY
// schemas are, and the values passed to it.
//
//   qk::plugin::Schema s = qk::plugin::parse_schema(
//       "fused_bias_gelu(Tensor x, Tensor bias, float scale=1.0) -> Tensor");
//   s.str();            // the same text, normalised
//   s.num_outputs;      // 1; "-> (Tensor, Tensor)" gives 2
//
// Argument types: Tensor, float (a double), int (an int64_t), bool. Scalars
// may have a default. Outputs are one Tensor or a tuple of Tensors. An op
// dispatches on the device of its tensors, so it takes at least one Tensor.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::plugin {

enum class ArgType : uint8_t { tensor, float_, int_, bool_ };
// "Tensor", "float", "int", "bool": the spelling in a schema.
const char* arg_type_name(ArgType t);

// One argument of a call: a Tensor or a scalar. Integers convert to int,
// floating-point numbers to float, as the literals read.
class Value {
 public:
  Value(Tensor t) : type_(ArgType::tensor), tensor_(std::move(t)) {}
  Value(bool b) : type_(ArgType::bool_), bool_(b) {}
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  Value(I i) : type_(ArgType::int_), int_(static_cast<int64_t>(i)) {}
  template <std::floating_point F>
  Value(F f) : type_(ArgType::float_), float_(static_cast<double>(f)) {}
  Value(const char*) = delete;  // would otherwise become a bool

  ArgType type() const { return type_; }
  bool is_tensor() const { return type_ == ArgType::tensor; }
  // The value as the type; TypeError when it is another one (an int reads as
  // a float, nothing else converts).
  const Tensor& tensor() const;
  double to_double() const;
  int64_t to_int() const;
  bool to_bool() const;
  // "Tensor f32[2, 3] on cpu", "0.5", "3", "true": for error messages.
  std::string str() const;

 private:
  ArgType type_;
  Tensor tensor_;
  double float_ = 0;
  int64_t int_ = 0;
  bool bool_ = false;
};

struct Argument {
  std::string name;
  ArgType type = ArgType::tensor;
  std::optional<Value> default_value;  // scalars only
};

struct Schema {
  std::string name;  // the op's own name, without the library's namespace
  std::vector<Argument> arguments;
  size_t num_outputs = 1;

  // "name(Tensor x, float alpha=1.0) -> Tensor".
  std::string str() const;
  size_t num_tensor_arguments() const;
  // Matches a call's values to the arguments: fills defaults, reads ints as
  // floats. Throws TypeError naming `op` (the qualified name), the argument,
  // what the schema wants and what was passed.
  std::vector<Value> bind(std::string_view op, const std::vector<Value>& values) const;
};

// Parses a schema; ValueError quoting the text and saying what is wrong where.
Schema parse_schema(std::string_view text);

}  // namespace qk::plugin

// Schema parsing and argument binding for extension ops.
#include "qk/plugin/schema.h"

#include <cctype>
#include <charconv>
#include <sstream>

#include "qk/base/error.h"

namespace qk::plugin {

const char* arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::tensor: return "Tensor";
    case ArgType::float_: return "float";
    case ArgType::int_: return "int";
    case ArgType::bool_: return "bool";
  }
  return "?";
}

// ---- Value ----

const Tensor& Value::tensor() const {
  QK_CHECK_TYPE(type_ == ArgType::tensor, "expected a Tensor, got ", arg_type_name(type_), " ",
                str());
  return tensor_;
}

double Value::to_double() const {
  if (type_ == ArgType::int_) return static_cast<double>(int_);
  QK_CHECK_TYPE(type_ == ArgType::float_, "expected a float, got ", arg_type_name(type_), " ",
                str());
  return float_;
}

int64_t Value::to_int() const {
  QK_CHECK_TYPE(type_ == ArgType::int_, "expected an int, got ", arg_type_name(type_), " ", str());
  return int_;
}

bool Value::to_bool() const {
  QK_CHECK_TYPE(type_ == ArgType::bool_, "expected a bool, got ", arg_type_name(type_), " ",
                str());
  return bool_;
}

std::string Value::str() const {
  switch (type_) {
    case ArgType::tensor:
      if (!tensor_.defined()) return "Tensor (undefined)";
      return ::qk::detail::str_cat("Tensor ", dtype_name(tensor_.dtype()), shape_str(tensor_.shape()),
                             " on ", tensor_.device().str());
    case ArgType::float_: {
      std::ostringstream os;
      os << float_;
      std::string s = os.str();
      // Keep a float looking like one ("1.0", not "1"), as a schema writes it.
      if (s.find_first_of(".einf") == std::string::npos) s += ".0";
      return s;
    }
    case ArgType::int_: return std::to_string(int_);
    case ArgType::bool_: return bool_ ? "true" : "false";
  }
  return "?";
}

// ---- Schema ----

std::string Schema::str() const {
  std::string s = name + "(";
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Argument& a = arguments[i];
    if (i) s += ", ";
    s += ::qk::detail::str_cat(arg_type_name(a.type), " ", a.name);
    if (a.default_value) {
      s += '=';
      s += a.default_value->str();
    }
  }
  s += ") -> ";
  if (num_outputs == 1) return s + "Tensor";
  s += "(";
  for (size_t k = 0; k < num_outputs; ++k) s += k ? ", Tensor" : "Tensor";
  return s + ")";
}

size_t Schema::num_tensor_arguments() const {
  size_t n = 0;
  for (const Argument& a : arguments) n += a.type == ArgType::tensor;
  return n;
}

std::vector<Value> Schema::bind(std::string_view op, const std::vector<Value>& values) const {
  size_t required = 0;
  for (const Argument& a : arguments) required += !a.default_value;
  const std::string want = required == arguments.size()
                               ? std::to_string(required)
                               : ::qk::detail::str_cat(required, " to ", arguments.size());
  QK_CHECK_AS(TypeError, values.size() >= required && values.size() <= arguments.size(), op,
              ": expected ", want, " argument(s), got ", values.size(), "; its schema is ",
              str());
  std::vector<Value> bound;
  bound.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Argument& a = arguments[i];
    if (i >= values.size()) {
      bound.push_back(*a.default_value);
      continue;
    }
    const Value& v = values[i];
    const bool int_as_float = a.type == ArgType::float_ && v.type() == ArgType::int_;
    QK_CHECK_AS(TypeError, v.type() == a.type || int_as_float, op, ": argument ", i, " '", a.name,
                "' must be ", arg_type_name(a.type), ", got ", arg_type_name(v.type()), " ",
                v.str(), "; its schema is ", str());
    if (a.type == ArgType::tensor)
      QK_CHECK_AS(TypeError, v.tensor().defined(), op, ": argument ", i, " '", a.name,
                  "' is an undefined Tensor");
    bound.push_back(int_as_float ? Value(v.to_double()) : v);
  }
  return bound;
}

// ---- parsing ----

namespace {

// A cursor over the schema text; errors quote the text and the position.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    QK_THROW(ValueError, "bad op schema '", text_, "': ", what, " at column ", pos_ + 1,
             "; the form is name(Tensor x, float alpha=1.0) -> Tensor or -> (Tensor, Tensor)");
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  bool accept(std::string_view token) {
    skip_space();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token) {
    if (!accept(token)) fail(::qk::detail::str_cat("expected '", token, "'"));
  }
  std::string identifier(const char* what) {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    if (pos_ == start || std::isdigit(static_cast<unsigned char>(text_[start])))
      fail(::qk::detail::str_cat("expected ", what));
    return std::string(text_.substr(start, pos_ - start));
  }
  ArgType type() {
    skip_space();
    const size_t start = pos_;
    const std::string t = identifier("a type (Tensor, float, int, bool)");
    if (t == "Tensor") return ArgType::tensor;
    if (t == "float") return ArgType::float_;
    if (t == "int") return ArgType::int_;
    if (t == "bool") return ArgType::bool_;
    pos_ = start;
    fail(::qk::detail::str_cat("unknown type '", t, "' (Tensor, float, int, bool)"));
  }
  Value literal(ArgType t) {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ')' &&
           !std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
    const std::string_view s = text_.substr(start, pos_ - start);
    const char* end = s.data() + s.size();
    if (t == ArgType::bool_) {
      if (s == "true" || s == "True") return Value(true);
      if (s == "false" || s == "False") return Value(false);
    } else if (t == ArgType::int_) {
      int64_t v = 0;
      auto r = std::from_chars(s.data(), end, v);
      if (!s.empty() && r.ec == std::errc() && r.ptr == end) return Value(v);
    } else {
      double v = 0;
      auto r = std::from_chars(s.data(), end, v);
      if (!s.empty() && r.ec == std::errc() && r.ptr == end) return Value(v);
    }
    pos_ = start;
    fail(::qk::detail::str_cat("'", s, "' is not a ", arg_type_name(t), " default"));
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Schema parse_schema(std::string_view text) {
  Parser p(text);
  Schema s;
  s.name = p.identifier("the op's name");
  p.expect("(");
  bool defaults_started = false;
  if (!p.accept(")")) {
    do {
      Argument a;
      a.type = p.type();
      a.name = p.identifier("an argument name");
      for (const Argument& other : s.arguments)
        if (other.name == a.name) p.fail(::qk::detail::str_cat("argument '", a.name, "' appears twice"));
      if (p.accept("=")) {
        if (a.type == ArgType::tensor) p.fail("a Tensor argument cannot have a default");
        a.default_value = p.literal(a.type);
        defaults_started = true;
      } else if (defaults_started) {
        p.fail(::qk::detail::str_cat("argument '", a.name, "' has no default but follows one that has"));
      }
      s.arguments.push_back(std::move(a));
    } while (p.accept(","));
    p.expect(")");
  }
  p.expect("->");
  if (p.accept("(")) {
    s.num_outputs = 0;
    do {
      if (p.type() != ArgType::tensor) p.fail("outputs are Tensors");
      ++s.num_outputs;
    } while (p.accept(","));
    p.expect(")");
  } else if (p.type() != ArgType::tensor) {
    p.fail("outputs are Tensors");
  }
  if (!p.at_end()) p.fail("unexpected text after the outputs");
  if (s.num_tensor_arguments() == 0)
    p.fail("an op dispatches on the device of its tensors and needs a Tensor argument");
  return s;
}

}  // namespace qk::plugin

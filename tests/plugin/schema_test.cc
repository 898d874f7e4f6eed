// Op schemas: what parses, what is refused and why, and how a call's values
// bind to the arguments.
#include <gtest/gtest.h>

#include "qk/plugin/schema.h"

namespace {
using namespace qk;
using namespace qk::plugin;

std::string parse_error(const std::string& text) {
  try {
    parse_schema(text);
  } catch (const ValueError& e) {
    return e.message();
  }
  return "(parsed)";
}

std::string bind_error(const Schema& s, const std::vector<Value>& values) {
  try {
    s.bind("ns::op", values);
  } catch (const TypeError& e) {
    return e.message();
  }
  return "(bound)";
}

TEST(Schema, ParsesArgumentsDefaultsAndOutputs) {
  Schema s = parse_schema("  fused ( Tensor x,Tensor bias, float alpha = 0.5, int n=3, bool flag=true ) -> Tensor");
  EXPECT_EQ(s.name, "fused");
  ASSERT_EQ(s.arguments.size(), 5u);
  EXPECT_EQ(s.arguments[1].name, "bias");
  EXPECT_EQ(s.arguments[1].type, ArgType::tensor);
  EXPECT_EQ(s.arguments[2].type, ArgType::float_);
  EXPECT_DOUBLE_EQ(s.arguments[2].default_value->to_double(), 0.5);
  EXPECT_EQ(s.arguments[3].default_value->to_int(), 3);
  EXPECT_TRUE(s.arguments[4].default_value->to_bool());
  EXPECT_EQ(s.num_outputs, 1u);
  EXPECT_EQ(s.num_tensor_arguments(), 2u);
  EXPECT_EQ(s.str(), "fused(Tensor x, Tensor bias, float alpha=0.5, int n=3, bool flag=true) -> Tensor");
  Schema t = parse_schema("g(Tensor x, float a=1) -> (Tensor, Tensor, Tensor)");
  EXPECT_EQ(t.num_outputs, 3u);
  EXPECT_EQ(t.str(), "g(Tensor x, float a=1.0) -> (Tensor, Tensor, Tensor)");
  EXPECT_EQ(parse_schema(t.str()).str(), t.str());
}

TEST(Schema, RefusesMalformedTextSayingWhere) {
  EXPECT_NE(parse_error("f(Tensor x)").find("expected '->'"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x, complex z) -> Tensor").find("unknown type 'complex'"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x, Tensor x) -> Tensor").find("'x' appears twice"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x=1) -> Tensor").find("cannot have a default"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x, int n=1.5) -> Tensor").find("'1.5' is not a int default"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x, int n=1, float a) -> Tensor").find("follows one that has"),
            std::string::npos);
  EXPECT_NE(parse_error("f(float a) -> Tensor").find("needs a Tensor argument"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x) -> float").find("outputs are Tensors"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor x) -> Tensor extra").find("unexpected text"), std::string::npos);
  EXPECT_NE(parse_error("ns::f(Tensor x) -> Tensor").find("expected '('"), std::string::npos);
  // The message quotes the schema and the column.
  EXPECT_NE(parse_error("f(Tensor x, complex z) -> Tensor").find("at column 13"), std::string::npos)
      << parse_error("f(Tensor x, complex z) -> Tensor");
}

TEST(Schema, BindFillsDefaultsAndReadsIntsAsFloats) {
  Schema s = parse_schema("f(Tensor x, float alpha=2.0, int n=1) -> Tensor");
  Tensor x = zeros({2});
  std::vector<Value> b = s.bind("ns::f", {x});
  ASSERT_EQ(b.size(), 3u);
  EXPECT_TRUE(b[0].tensor().is_same(x));
  EXPECT_DOUBLE_EQ(b[1].to_double(), 2.0);
  EXPECT_EQ(b[2].to_int(), 1);
  b = s.bind("ns::f", {x, 3, int64_t{7}});
  EXPECT_EQ(b[1].type(), ArgType::float_);  // an int where a float goes
  EXPECT_DOUBLE_EQ(b[1].to_double(), 3.0);
  EXPECT_EQ(b[2].to_int(), 7);
}

TEST(Schema, BindRefusesAMismatchNamingTheArgument) {
  Schema s = parse_schema("f(Tensor x, Tensor bias, int n=1) -> Tensor");
  Tensor x = zeros({2});
  std::string e = bind_error(s, {x});
  EXPECT_NE(e.find("ns::op: expected 2 to 3 argument(s), got 1"), std::string::npos) << e;
  EXPECT_NE(e.find("f(Tensor x, Tensor bias, int n=1) -> Tensor"), std::string::npos) << e;
  e = bind_error(s, {x, 1.5});
  EXPECT_NE(e.find("argument 1 'bias' must be Tensor, got float 1.5"), std::string::npos) << e;
  e = bind_error(s, {x, x, 2.5});
  EXPECT_NE(e.find("argument 2 'n' must be int, got float 2.5"), std::string::npos) << e;
  e = bind_error(s, {x, Tensor()});
  EXPECT_NE(e.find("'bias' is an undefined Tensor"), std::string::npos) << e;
  e = bind_error(s, {x, x, 1, 2});
  EXPECT_NE(e.find("got 4"), std::string::npos) << e;
}

TEST(Schema, ValuesKeepTheirKind) {
  EXPECT_EQ(Value(3).type(), ArgType::int_);
  EXPECT_EQ(Value(int64_t{3}).type(), ArgType::int_);
  EXPECT_EQ(Value(3.0f).type(), ArgType::float_);
  EXPECT_EQ(Value(true).type(), ArgType::bool_);
  EXPECT_EQ(Value(zeros({2, 3})).str(), "Tensor f32[2, 3] on cpu");
  EXPECT_THROW(Value(1.5).to_int(), TypeError);
  EXPECT_THROW(Value(true).to_double(), TypeError);
  EXPECT_THROW(Value(1).tensor(), TypeError);
}

}  // namespace

// The differentiable elementwise functions and operators of
// qk/autograd/functions.h, forward and gradients.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;
using Fn2 = std::function<Tensor(const Tensor&, const Tensor&)>;
using Fn1 = std::function<Tensor(const Tensor&)>;
enum class Domain { any, positive, nonzero };

Gen domain_gen(Values& v, DType t, Domain d) {
  switch (d) {
    case Domain::positive:
      return [&v, t](const Shape& s) { return v.positive(s, t); };
    case Domain::nonzero:
      return [&v, t](const Shape& s) { return v.nonzero(s, t); };
    default:
      return [&v, t](const Shape& s) { return v.data(s, t); };
  }
}

struct Pair {
  Shape a, b;
  Layout la = Layout::contiguous, lb = Layout::contiguous;
};
const std::vector<Pair> kPairs = {
    {{7, 13}, {7, 13}},
    {{7, 13}, {13}},
    {{7, 13}, {7, 1}, Layout::transposed},
    {{1031}, {1031}},
    {{0, 13}, {0, 13}},
    {{}, {5}},
    {{7, 13}, {7, 13}, Layout::expanded, Layout::sliced},
};

const std::vector<std::pair<Shape, Layout>> kSingles = {
    {{7, 13}, Layout::contiguous}, {{7, 13}, Layout::transposed}, {{7, 13}, Layout::sliced},
    {{1031}, Layout::contiguous},  {{0, 5}, Layout::contiguous},  {{}, Layout::contiguous},
};

void binary(std::vector<Case>& out, Values& v, const std::string& name, Fn2 f,
            Domain da = Domain::any, Domain db = Domain::any,
            std::vector<std::string> covers = {}) {
  for (DType t : kFloating) {
    for (const Pair& p : kPairs) {
      Case c;
      c.op = name;
      c.covers = covers;
      c.shape = str_cat(shape_label(p.a, p.la), ",", shape_label(p.b, p.lb));
      c.dtype = t;
      c.inputs = {laid_out(p.a, p.la, domain_gen(v, t, da)),
                  laid_out(p.b, p.lb, domain_gen(v, t, db))};
      c.fn = [f](const V& a) { return V{f(a[0], a[1])}; };
      out.push_back(std::move(c));
    }
  }
}

void unary(std::vector<Case>& out, Values& v, const std::string& name, Fn1 f,
           Domain d = Domain::any, const std::string& variant = "",
           std::vector<std::string> covers = {}) {
  for (DType t : kFloating) {
    for (const auto& [shape, layout] : kSingles) {
      Case c;
      c.op = name;
      c.covers = covers;
      c.shape = label({variant, shape_label(shape, layout)});
      c.dtype = t;
      c.inputs = {laid_out(shape, layout, domain_gen(v, t, d))};
      c.fn = [f](const V& a) { return V{f(a[0])}; };
      out.push_back(std::move(c));
    }
  }
}

}  // namespace

void add_elementwise_autograd_cases(std::vector<Case>& out) {
  Values v(202);
  const std::vector<std::string> unary_bwd = {"ops::unary_backward"};
  binary(out, v, "add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  binary(out, v, "sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  binary(out, v, "mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  binary(
      out, v, "div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, Domain::any,
      Domain::nonzero);
  binary(
      out, v, "pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, Domain::positive);
  binary(out, v, "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  binary(out, v, "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  binary(out, v, "operator+", [](const Tensor& a, const Tensor& b) { return a + b; });
  binary(out, v, "operator-", [](const Tensor& a, const Tensor& b) { return a - b; });
  binary(out, v, "operator*", [](const Tensor& a, const Tensor& b) { return a * b; });
  binary(
      out, v, "operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, Domain::any,
      Domain::nonzero);

  // With a scalar, on either side.
  unary(
      out, v, "add", [](const Tensor& a) { return add(a, 0.75); }, Domain::any, "+0.75");
  unary(
      out, v, "mul", [](const Tensor& a) { return mul(a, -1.5); }, Domain::any, "*-1.5");
  unary(
      out, v, "pow", [](const Tensor& a) { return pow(a, 2.5); }, Domain::positive, "^2.5");
  unary(
      out, v, "operator+", [](const Tensor& a) { return 2.0 + (a + 0.5); }, Domain::any, "scalar");
  unary(
      out, v, "operator-", [](const Tensor& a) { return 2.0 - (a - 0.5); }, Domain::any, "scalar");
  unary(
      out, v, "operator-", [](const Tensor& a) { return -a; }, Domain::any, "unary");
  unary(
      out, v, "operator*", [](const Tensor& a) { return 2.0 * (a * 0.5); }, Domain::any, "scalar");
  unary(
      out, v, "operator/", [](const Tensor& a) { return 2.0 / (a / 0.5); }, Domain::nonzero,
      "scalar");

  unary(out, v, "neg", [](const Tensor& a) { return neg(a); });
  unary(
      out, v, "exp", [](const Tensor& a) { return exp(a); }, Domain::any, "", unary_bwd);
  unary(
      out, v, "log", [](const Tensor& a) { return log(a); }, Domain::positive);
  unary(
      out, v, "sqrt", [](const Tensor& a) { return sqrt(a); }, Domain::positive);
  unary(
      out, v, "rsqrt", [](const Tensor& a) { return rsqrt(a); }, Domain::positive);
  unary(out, v, "square", [](const Tensor& a) { return square(a); });
  unary(
      out, v, "abs", [](const Tensor& a) { return abs(a); }, Domain::nonzero);
  unary(
      out, v, "relu", [](const Tensor& a) { return relu(a); }, Domain::nonzero);
  unary(
      out, v, "gelu", [](const Tensor& a) { return gelu(a); }, Domain::any, "none");
  unary(
      out, v, "gelu", [](const Tensor& a) { return gelu(a, "tanh"); }, Domain::any, "tanh");
  unary(out, v, "silu", [](const Tensor& a) { return silu(a); });
  unary(out, v, "tanh", [](const Tensor& a) { return tanh(a); });
  unary(out, v, "sigmoid", [](const Tensor& a) { return sigmoid(a); });
  unary(out, v, "clamp", [](const Tensor& a) { return clamp(a, -0.5, std::nullopt); }, Domain::any,
        "min", {"ops::clamp_backward"});
  unary(
      out, v, "clamp", [](const Tensor& a) { return clamp(a, -1.0, 1.0); }, Domain::any, "both");

  for (DType t : kFloating) {
    Gen g = domain_gen(v, t, Domain::any);
    Case w;
    w.op = "where";
    w.shape = "[7,1]?[7,13]T:[13]";
    w.dtype = t;
    w.inputs = {data(v.mask({7, 1}), false), laid_out({7, 13}, Layout::transposed, g),
                laid_out({13}, Layout::contiguous, g)};
    w.fn = [](const V& a) { return V{where(a[0], a[1], a[2])}; };
    out.push_back(w);
    Case m;
    m.op = "masked_fill";
    m.shape = "[7,13]slice mask[7,1]";
    m.dtype = t;
    m.inputs = {laid_out({7, 13}, Layout::sliced, g), data(v.mask({7, 1}), false)};
    m.fn = [](const V& a) { return V{masked_fill(a[0], a[1], -2.5)}; };
    out.push_back(m);
  }
  // Comparisons: bool results, no gradient.
  using Cmp = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<std::string, Cmp>> cmps = {{"eq", &eq}, {"ne", &ne}, {"lt", &lt},
                                                         {"le", &le}, {"gt", &gt}, {"ge", &ge}};
  for (const auto& [name, f] : cmps) {
    for (DType t : kNumeric) {
      Gen g = [&v, t](const Shape& s) { return v.whole(s, t, 0, 2); };
      Case c;
      c.op = name;
      c.shape = "[7,13]T,[13]";
      c.dtype = t;
      c.inputs = {laid_out({7, 13}, Layout::transposed, g, false),
                  laid_out({13}, Layout::contiguous, g, false)};
      c.fn = [f](const V& a) { return V{f(a[0], a[1])}; };
      out.push_back(std::move(c));
    }
  }
}

}  // namespace qk::harness

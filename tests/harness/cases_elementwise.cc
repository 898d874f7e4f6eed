// Raw elementwise ops (qk/tensor/ops/elementwise.h): every BinaryOp and
// UnaryOp x the dtypes it takes x broadcast, empty, odd, 0-d and strided
// shapes; clamp, where, masked_fill and the in-place ops.
#include "harness/case_builders.h"
#include "qk/tensor/ops/elementwise.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;

Case make(std::string op, std::string shape, DType t, std::vector<Input> in, OpFn fn) {
  Case c;
  c.op = std::move(op);
  c.shape = std::move(shape);
  c.dtype = t;
  c.inputs = std::move(in);
  c.fn = std::move(fn);
  return c;
}

struct BinaryShape {
  Shape a, b;
  Layout la = Layout::contiguous, lb = Layout::contiguous;
  std::string str() const { return str_cat(shape_label(a, la), "+", shape_label(b, lb)); }
};
const std::vector<BinaryShape> kBinaryShapes = {
    {{7, 13}, {7, 13}},
    {{7, 13}, {13}},
    {{7, 1}, {1, 13}},
    {{1031}, {1031}},
    {{0, 13}, {0, 13}},
    {{}, {5}},
    {{7, 13}, {7, 13}, Layout::transposed, Layout::contiguous},
    {{7, 13}, {7, 13}, Layout::contiguous, Layout::sliced},
    {{7, 13}, {13}, Layout::expanded, Layout::contiguous},
    // Large enough for the kernels' threaded and vectorised paths.
    {{129, 67}, {67}},
    {{129, 67}, {129, 67}, Layout::transposed, Layout::contiguous},
    // Channels last (memory_format.h): a per-channel operand, and a contiguous one.
    {{2, 5, 3, 4}, {1, 5, 1, 1}, Layout::channels_last, Layout::contiguous},
    {{2, 5, 3, 4}, {2, 5, 3, 4}, Layout::contiguous, Layout::channels_last},
};

// add/sub/mul/div go through their named wrappers, the rest through binary().
Tensor call_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::add:
      return ops::add(a, b);
    case BinaryOp::sub:
      return ops::sub(a, b);
    case BinaryOp::mul:
      return ops::mul(a, b);
    case BinaryOp::div:
      return ops::div(a, b);
    default:
      return ops::binary(op, a, b);
  }
}

const std::vector<DType>& binary_dtypes(BinaryOp op) {
  static const std::vector<DType> pow_dtypes = {DType::f32, DType::f64, DType::bf16,
                                                DType::f16, DType::i32, DType::i64};
  switch (op) {
    case BinaryOp::div:
      return kFloating;
    case BinaryOp::pow:
      return pow_dtypes;
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
      return kAll;
    default:
      return kNumeric;
  }
}

// The operands' values: positive bases for pow, safe denominators for div,
// whole numbers for comparisons (so that equal pairs occur).
std::pair<Gen, Gen> binary_values(Values& v, BinaryOp op, DType t) {
  const bool integer = !is_floating(t);
  if (op >= BinaryOp::eq) {
    auto g = [&v, t](const Shape& s) {
      return t == DType::boolean ? v.mask(s) : v.whole(s, t, 0, 2);
    };
    return {g, g};
  }
  if (op == BinaryOp::div) {
    return {[&v, t](const Shape& s) { return v.data(s, t); },
            [&v, t](const Shape& s) { return v.nonzero(s, t); }};
  }
  if (op == BinaryOp::pow) {
    if (integer)
      return {[&v, t](const Shape& s) { return v.whole(s, t, 0, 4); },
              [&v, t](const Shape& s) { return v.whole(s, t, 0, 3); }};
    return {[&v, t](const Shape& s) { return v.positive(s, t); },
            [&v, t](const Shape& s) { return v.data(s, t); }};
  }
  auto g = [&v, t](const Shape& s) { return v.data(s, t); };
  return {g, g};
}

void binary_cases(std::vector<Case>& out, Values& v) {
  for (int k = 0; k <= static_cast<int>(BinaryOp::ge); ++k) {
    const BinaryOp op = static_cast<BinaryOp>(k);
    for (DType t : binary_dtypes(op)) {
      auto [ga, gb] = binary_values(v, op, t);
      for (const BinaryShape& s : kBinaryShapes) {
        Case c = make("ops::binary", label({binary_op_name(op), s.str()}), t,
                      {laid_out(s.a, s.la, ga, false), laid_out(s.b, s.lb, gb, false)},
                      [op](const V& a) { return V{call_binary(op, a[0], a[1])}; });
        if (op <= BinaryOp::div) c.covers = {str_cat("ops::", binary_op_name(op))};
        // u8 subtraction wraps around where f64 goes negative.
        c.f64_reference = !(t == DType::u8 && op == BinaryOp::sub);
        out.push_back(std::move(c));
      }
      // The scalar form: the right operand a 0-d tensor of a's dtype.
      const double scalar = op == BinaryOp::div  ? 0.75
                            : op >= BinaryOp::eq ? 1.0
                            : is_floating(t)     ? 0.75
                                                 : 2.0;
      if (t == DType::boolean) continue;
      Case c = make("ops::binary_scalar", str_cat(binary_op_name(op), " [7,13]T"), t,
                    {laid_out({7, 13}, Layout::transposed, ga, false)},
                    [op, scalar](const V& a) { return V{ops::binary_scalar(op, a[0], scalar)}; });
      c.f64_reference = !(t == DType::u8 && op == BinaryOp::sub);
      out.push_back(std::move(c));
    }
  }
}

bool takes_integers(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign || op == UnaryOp::square ||
         op == UnaryOp::relu;
}
bool needs_positive(UnaryOp op) {
  return op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt ||
         op == UnaryOp::reciprocal;
}

const std::vector<std::pair<Shape, Layout>> kUnaryShapes = {
    {{7, 13}, Layout::contiguous},   {{7, 13}, Layout::transposed},   {{7, 13}, Layout::sliced},
    {{1031}, Layout::contiguous},    {{0}, Layout::contiguous},       {{}, Layout::contiguous},
    {{129, 67}, Layout::contiguous}, {{129, 67}, Layout::transposed}, {{2, 5, 3, 4}, Layout::channels_last},
};

void unary_cases(std::vector<Case>& out, Values& v) {
  for (int k = 0; k <= static_cast<int>(UnaryOp::erf); ++k) {
    const UnaryOp op = static_cast<UnaryOp>(k);
    std::vector<DType> dtypes = kFloating;
    if (takes_integers(op)) dtypes.insert(dtypes.end(), kIntegers.begin(), kIntegers.end());
    for (DType t : dtypes) {
      Gen g = needs_positive(op) ? Gen([&v, t](const Shape& s) { return v.positive(s, t); })
                                 : Gen([&v, t](const Shape& s) { return v.data(s, t); });
      for (const auto& [shape, layout] : kUnaryShapes) {
        Case c = make("ops::unary", label({unary_op_name(op), shape_label(shape, layout)}), t,
                      {laid_out(shape, layout, g, false)},
                      [op](const V& a) { return V{ops::unary(op, a[0])}; });
        c.f64_reference = !(t == DType::u8 && op == UnaryOp::neg);
        out.push_back(std::move(c));
      }
      if (!is_floating(t)) continue;
      // The backward kernel, given the incoming gradient, x and y = op(x).
      for (Layout layout : {Layout::contiguous, Layout::transposed}) {
        Case c =
            make("ops::unary_backward", label({unary_op_name(op), shape_label({7, 13}, layout)}), t,
                 {laid_out(
                      {7, 13}, layout, [&v, t](const Shape& s) { return v.data(s, t); }, false),
                  laid_out({7, 13}, layout, g, false)},
                 [op](const V& a) {
                   Tensor y = ops::unary(op, a[1]);
                   return V{ops::unary_backward(op, a[0], a[1], y)};
                 });
        out.push_back(std::move(c));
      }
    }
  }
}

void clamp_where_cases(std::vector<Case>& out, Values& v) {
  using Bounds = std::pair<std::optional<double>, std::optional<double>>;
  const std::vector<std::pair<std::string, Bounds>> bounds = {
      {"min=-0.5", {-0.5, std::nullopt}}, {"max=1", {std::nullopt, 1.0}}, {"[-1,1]", {-1.0, 1.0}}};
  for (DType t : kNumeric) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const auto& [name, b] : bounds) {
      const Bounds bb = is_floating(t) ? b
                                       : Bounds{b.first ? std::optional<double>(2) : std::nullopt,
                                                b.second ? std::optional<double>(5) : std::nullopt};
      for (const auto& [shape, layout] :
           std::vector<std::pair<Shape, Layout>>{{{7, 13}, Layout::contiguous},
                                                 {{7, 13}, Layout::transposed},
                                                 {{0, 3}, Layout::contiguous}}) {
        out.push_back(make("ops::clamp", label({name, shape_label(shape, layout)}), t,
                           {laid_out(shape, layout, g, false)},
                           [bb](const V& a) { return V{ops::clamp(a[0], bb.first, bb.second)}; }));
        if (!is_floating(t)) continue;
        out.push_back(make(
            "ops::clamp_backward", label({name, shape_label(shape, layout)}), t,
            {laid_out(shape, layout, g, false), laid_out(shape, layout, g, false)},
            [bb](const V& a) { return V{ops::clamp_backward(a[0], a[1], bb.first, bb.second)}; }));
      }
    }
  }
  for (DType t : kAll) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    out.push_back(
        make("ops::where", "[7,1]?[7,13]:[13]", t,
             {data(v.mask({7, 1}), false), laid_out({7, 13}, Layout::transposed, g, false),
              laid_out({13}, Layout::contiguous, g, false)},
             [](const V& a) { return V{ops::where(a[0], a[1], a[2])}; }));
    out.push_back(
        make("ops::where", "[0,13]", t,
             {data(v.mask({0, 13}), false), data(g({0, 13}), false), data(g({0, 13}), false)},
             [](const V& a) { return V{ops::where(a[0], a[1], a[2])}; }));
    const double fill = t == DType::boolean ? 1 : 3;
    out.push_back(make("ops::masked_fill", "[7,13]T mask[13]", t,
                       {laid_out({7, 13}, Layout::transposed, g, false), data(v.mask({13}), false)},
                       [fill](const V& a) { return V{ops::masked_fill(a[0], a[1], fill)}; }));
  }
}

void inplace_cases(std::vector<Case>& out, Values& v) {
  for (DType t : kNumeric) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    const double alpha = is_floating(t) ? 0.5 : 2;
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
      const std::string s = shape_label({7, 13}, layout);
      out.push_back(
          make("ops::add_", label({s, "+=[13]"}), t,
               {laid_out({7, 13}, layout, g, false), laid_out({13}, Layout::contiguous, g, false)},
               [alpha](const V& a) {
                 ops::add_(a[0], a[1], alpha);
                 return V{a[0]};
               }));
      for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::maximum}) {
        Case c = make("ops::binary_scalar_", label({s, binary_op_name(op), "=scalar"}), t,
                      {laid_out({7, 13}, layout, g, false)}, [op, alpha](const V& a) {
                        ops::binary_scalar_(op, a[0], alpha);
                        return V{a[0]};
                      });
        c.f64_reference = !(t == DType::u8 && op == BinaryOp::sub);
        out.push_back(std::move(c));
      }
      out.push_back(make("ops::mul_", label({s, "*=scalar"}), t,
                         {laid_out({7, 13}, layout, g, false)}, [alpha](const V& a) {
                           ops::mul_(a[0], alpha);
                           return V{a[0]};
                         }));
      out.push_back(make(
          "ops::mul_", label({s, "*=[7,1]"}), t,
          {laid_out({7, 13}, layout, g, false), laid_out({7, 1}, Layout::contiguous, g, false)},
          [](const V& a) {
            ops::mul_(a[0], a[1]);
            return V{a[0]};
          }));
    }
  }
}

}  // namespace

void add_elementwise_cases(std::vector<Case>& out) {
  Values v(101);
  binary_cases(out, v);
  unary_cases(out, v);
  clamp_where_cases(out, v);
  inplace_cases(out, v);
}

}  // namespace qk::harness

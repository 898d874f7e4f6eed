// Reductions, raw (qk/tensor/ops/reduce.h) and differentiable
// (qk/autograd/functions.h): over all dims, one, several, kept or not, of
// contiguous, transposed and sliced inputs; odd, empty and 0-d shapes.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/reduce.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;
using ReduceFn = std::function<Tensor(const Tensor&, const Shape&, bool)>;

struct Reduction {
  Shape shape;
  Shape dims;
  bool keepdim = false;
  Layout layout = Layout::contiguous;
  std::string str() const {
    return label({shape_label(shape, layout), "dims=" + shape_label(dims), keepdim ? "keep" : ""});
  }
};

const std::vector<Reduction> kReductions = {
    {{3, 5, 7}, {}},
    {{3, 5, 7}, {1}},
    {{3, 5, 7}, {0, 2}, true},
    {{3, 5, 7}, {-1}, false, Layout::transposed},
    {{3, 5, 7}, {0}, true, Layout::sliced},
    {{3, 5, 7}, {1, 2}, false, Layout::expanded},
    {{1031}, {}},
    {{2, 1031}, {1}},
    {{}, {}},
    {{129, 67}, {1}},
    {{129, 67}, {0}, false, Layout::transposed},
};
// Reductions of an empty tensor: sums are 0, means NaN (amax/amin refuse).
const std::vector<Reduction> kEmptyReductions = {{{0, 5}, {0}}, {{4, 0}, {}}};

void reductions(std::vector<Case>& out, Values& v, const std::string& name,
                const std::vector<DType>& dtypes, ReduceFn f, bool empty_ok, bool grad,
                const std::string& variant = "") {
  std::vector<Reduction> rs = kReductions;
  // The unbiased variance of one value divides by zero.
  if (name.find("var") != std::string::npos)
    std::erase_if(rs, [](const Reduction& r) { return r.shape.empty(); });
  if (empty_ok) rs.insert(rs.end(), kEmptyReductions.begin(), kEmptyReductions.end());
  for (DType t : dtypes) {
    for (const Reduction& r : rs) {
      Case c;
      c.op = name;
      c.shape = label({variant, r.str()});
      c.dtype = t;
      c.inputs = {laid_out(
          r.shape, r.layout, [&v, t](const Shape& s) { return v.data(s, t); }, grad)};
      c.fn = [f, r](const V& a) { return V{f(a[0], r.dims, r.keepdim)}; };
      out.push_back(std::move(c));
    }
  }
}

using ExtremeFn = std::function<V(const Tensor&, int64_t, bool)>;
void extremes(std::vector<Case>& out, Values& v, const std::string& name,
              const std::vector<DType>& dtypes, ExtremeFn f, bool grad) {
  struct Along {
    Shape shape;
    int64_t dim;
    bool keepdim;
    Layout layout;
  };
  const std::vector<Along> alongs = {{{3, 5, 7}, 0, false, Layout::contiguous},
                                     {{3, 5, 7}, 1, true, Layout::transposed},
                                     {{3, 5, 7}, -1, false, Layout::sliced},
                                     {{1031}, 0, false, Layout::contiguous},
                                     {{}, 0, false, Layout::contiguous}};
  for (DType t : dtypes) {
    for (const Along& al : alongs) {
      Case c;
      c.op = name;
      c.shape = label(
          {shape_label(al.shape, al.layout), str_cat("dim=", al.dim), al.keepdim ? "keep" : ""});
      c.dtype = t;
      c.inputs = {laid_out(
          al.shape, al.layout, [&v, t](const Shape& s) { return v.data(s, t); }, grad)};
      c.fn = [f, al](const V& a) { return f(a[0], al.dim, al.keepdim); };
      out.push_back(std::move(c));
    }
  }
}

std::vector<DType> with_integers(std::vector<DType> d) {
  d.insert(d.end(), kIntegers.begin(), kIntegers.end());
  return d;
}

}  // namespace

void add_reduce_cases(std::vector<Case>& out) {
  Values v(303);
  const auto numeric = with_integers(kFloating);
  // Raw.
  reductions(
      out, v, "ops::sum", numeric,
      [](const Tensor& a, const Shape& d, bool k) { return ops::sum(a, d, k); }, true, false);
  reductions(
      out, v, "ops::mean", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return ops::mean(a, d, k); }, true, false);
  reductions(
      out, v, "ops::var", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return ops::var(a, d, true, k); }, false, false,
      "unbiased");
  reductions(
      out, v, "ops::var", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return ops::var(a, d, false, k); }, false,
      false, "biased");
  reductions(
      out, v, "ops::amax", numeric,
      [](const Tensor& a, const Shape& d, bool k) { return ops::amax(a, d, k); }, false, false);
  reductions(
      out, v, "ops::amin", numeric,
      [](const Tensor& a, const Shape& d, bool k) { return ops::amin(a, d, k); }, false, false);
  extremes(
      out, v, "ops::max_dim", numeric,
      [](const Tensor& a, int64_t d, bool k) {
        auto [x, i] = ops::max_dim(a, d, k);
        return V{x, i};
      },
      false);
  extremes(
      out, v, "ops::min_dim", numeric,
      [](const Tensor& a, int64_t d, bool k) {
        auto [x, i] = ops::min_dim(a, d, k);
        return V{x, i};
      },
      false);
  extremes(
      out, v, "ops::argmax", numeric,
      [](const Tensor& a, int64_t d, bool k) { return V{ops::argmax(a, d, k)}; }, false);
  extremes(
      out, v, "ops::argmin", numeric,
      [](const Tensor& a, int64_t d, bool k) { return V{ops::argmin(a, d, k)}; }, false);
  for (DType t : numeric) {
    for (const auto& [from, to] : std::vector<std::pair<Shape, Shape>>{
             {{7, 13}, {13}}, {{7, 13}, {7, 1}}, {{2, 7, 13}, {1, 13}}, {{0, 13}, {13}}}) {
      Case c;
      c.op = "ops::sum_to";
      c.shape = str_cat(shape_label(from), "->", shape_label(to));
      c.dtype = t;
      c.inputs = {data(v.data(from, t), false)};
      c.fn = [to](const V& a) { return V{ops::sum_to(a[0], to)}; };
      out.push_back(std::move(c));
    }
  }
  // Differentiable.
  reductions(
      out, v, "sum", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return sum(a, d, k); }, true, true);
  reductions(
      out, v, "mean", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return mean(a, d, k); }, true, true);
  reductions(
      out, v, "var", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return var(a, d, true, k); }, false, true);
  reductions(
      out, v, "amax", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return amax(a, d, k); }, false, true);
  reductions(
      out, v, "amin", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return amin(a, d, k); }, false, true);
  reductions(
      out, v, "Tensor::sum", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return d.empty() ? a.sum() : a.sum(d, k); },
      true, true);
  reductions(
      out, v, "Tensor::mean", kFloating,
      [](const Tensor& a, const Shape& d, bool k) { return d.empty() ? a.mean() : a.mean(d, k); },
      true, true);
  extremes(
      out, v, "max", kFloating,
      [](const Tensor& a, int64_t d, bool k) {
        auto [x, i] = max(a, d, k);
        return V{x, i};
      },
      true);
  extremes(
      out, v, "min", kFloating,
      [](const Tensor& a, int64_t d, bool k) {
        auto [x, i] = min(a, d, k);
        return V{x, i};
      },
      true);
  extremes(
      out, v, "argmax", kFloating,
      [](const Tensor& a, int64_t d, bool k) { return V{argmax(a, d, k)}; }, false);
  extremes(
      out, v, "argmin", kFloating,
      [](const Tensor& a, int64_t d, bool k) { return V{argmin(a, d, k)}; }, false);
}

}  // namespace qk::harness

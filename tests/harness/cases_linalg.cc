// Matrix products, raw (qk/tensor/ops/linalg.h) and differentiable: mm, bmm,
// matmul (vectors, broadcast batches), linear; transposed, sliced and
// expanded operands, K = 1031, empty M and K; grouped products.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/grouped_linalg.h"
#include "qk/tensor/ops/index.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

using V = std::vector<Tensor>;
using Fn2 = Tensor (*)(const Tensor&, const Tensor&);

struct Operands {
  Shape a, b;
  Layout la = Layout::contiguous, lb = Layout::contiguous;
};

void products(std::vector<Case>& out, Values& v, const std::string& name, Fn2 f,
              const std::vector<Operands>& shapes, bool grad) {
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    for (const Operands& o : shapes) {
      Case c;
      c.op = name;
      c.shape = str_cat(shape_label(o.a, o.la), "x", shape_label(o.b, o.lb));
      c.dtype = t;
      c.inputs = {laid_out(o.a, o.la, g, grad), laid_out(o.b, o.lb, g, grad)};
      c.fn = [f](const V& a) { return V{f(a[0], a[1])}; };
      out.push_back(std::move(c));
    }
  }
}

const std::vector<Operands> kMm = {
    {{7, 13}, {13, 5}},
    {{7, 13}, {13, 5}, Layout::transposed},
    {{7, 13}, {13, 5}, Layout::contiguous, Layout::transposed},
    {{7, 13}, {13, 5}, Layout::transposed, Layout::transposed},
    {{7, 13}, {13, 5}, Layout::sliced, Layout::expanded},
    {{3, 1031}, {1031, 4}},
    {{4, 0}, {0, 3}},
    {{0, 5}, {5, 3}},
    {{129, 67}, {67, 33}, Layout::transposed, Layout::contiguous},
};
const std::vector<Operands> kBmm = {
    {{3, 7, 5}, {3, 5, 4}},
    {{3, 7, 5}, {3, 5, 4}, Layout::transposed, Layout::transposed},
    {{3, 7, 5}, {3, 5, 4}, Layout::expanded, Layout::sliced},
    {{2, 3, 1031}, {2, 1031, 3}},
    {{0, 2, 3}, {0, 3, 4}},
};
const std::vector<Operands> kMatmul = {
    {{13}, {13}},
    {{13}, {13, 5}},
    {{7, 13}, {13}, Layout::transposed},
    {{2, 1, 7, 5}, {3, 5, 4}},
    {{7, 13}, {13, 5}, Layout::contiguous, Layout::transposed},
    {{2, 7, 13}, {13, 5}, Layout::sliced},
};

Tensor raw_mm(const Tensor& a, const Tensor& b) { return ops::mm(a, b); }
Tensor raw_bmm(const Tensor& a, const Tensor& b) { return ops::bmm(a, b); }
Tensor raw_matmul(const Tensor& a, const Tensor& b) { return ops::matmul(a, b); }
Tensor grad_mm(const Tensor& a, const Tensor& b) { return mm(a, b); }
Tensor grad_bmm(const Tensor& a, const Tensor& b) { return bmm(a, b); }
Tensor grad_matmul(const Tensor& a, const Tensor& b) { return matmul(a, b); }

void linears(std::vector<Case>& out, Values& v, bool autograd) {
  struct Lin {
    Shape x;
    Layout lx;
    bool bias;
    Layout lw;
  };
  const std::vector<Lin> lins = {{{7, 13}, Layout::contiguous, true, Layout::contiguous},
                                 {{7, 13}, Layout::transposed, false, Layout::contiguous},
                                 {{2, 3, 13}, Layout::sliced, true, Layout::transposed},
                                 {{5, 1031}, Layout::contiguous, true, Layout::contiguous},
                                 {{0, 13}, Layout::contiguous, true, Layout::contiguous}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    for (const Lin& l : lins) {
      const int64_t in = l.x.back();
      Case c;
      c.op = autograd ? "linear" : "ops::linear";
      c.shape = label({str_cat("x", shape_label(l.x, l.lx)),
                       str_cat("w", shape_label({5, in}, l.lw)), l.bias ? "bias" : ""});
      c.dtype = t;
      c.inputs = {laid_out(l.x, l.lx, g, autograd), laid_out({5, in}, l.lw, g, autograd),
                  l.bias ? laid_out({5}, Layout::contiguous, g, autograd) : none()};
      c.fn = [autograd](const V& a) {
        return V{autograd ? linear(a[0], a[1], a[2]) : ops::linear(a[0], a[1], a[2])};
      };
      out.push_back(std::move(c));
    }
  }
}

// Grouped products (qk/tensor/ops/grouped_linalg.h): groups of rows, one
// empty, each against its own matrix; the reference is the loop of plain
// products it replaces.
struct Grouped {
  int64_t K, N;
  std::vector<int64_t> rows;
  bool trans_b, bias;
  Layout la;
};

int64_t total_rows(const std::vector<int64_t>& rows) {
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  return m;
}

// Inputs: a, then the groups' b, then their biases.
V grouped_loop(const Grouped& gp, const V& in) {
  const size_t groups = gp.rows.size();
  V parts;
  int64_t at = 0;
  for (size_t g = 0; g < groups; ++g) {
    Tensor a = ops::narrow(in[0], 0, at, gp.rows[g]);
    at += gp.rows[g];
    Tensor b = gp.trans_b ? ops::transpose(in[1 + g], 0, 1) : in[1 + g];
    Tensor y = ops::mm(a, b);
    if (gp.bias) y = ops::add(y, in[1 + groups + g]);
    parts.push_back(y);
  }
  return V{ops::cat(parts, 0)};
}

void grouped(std::vector<Case>& out, Values& v) {
  const std::vector<Grouped> gps = {{7, 5, {5, 0, 8}, true, true, Layout::contiguous},
                                    {7, 5, {5, 0, 8}, false, false, Layout::transposed},
                                    {67, 33, {64, 1, 0, 64}, true, false, Layout::contiguous}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -1, 1); };
    for (const Grouped& gp : gps) {
      const int64_t m = total_rows(gp.rows);
      const std::string sh =
          label({str_cat("a", shape_label({m, gp.K}, gp.la)), "rows" + shape_label(gp.rows),
                 str_cat("b[", gp.trans_b ? gp.N : gp.K, ",", gp.trans_b ? gp.K : gp.N, "]"),
                 gp.trans_b ? "trans_b" : "", gp.bias ? "bias" : ""});
      Case c;
      c.op = "ops::grouped_mm";
      c.shape = sh;
      c.dtype = t;
      c.inputs = {laid_out({m, gp.K}, gp.la, g, false)};
      for (size_t k = 0; k < gp.rows.size(); ++k)
        c.inputs.push_back(data(g(gp.trans_b ? Shape{gp.N, gp.K} : Shape{gp.K, gp.N}), false));
      if (gp.bias)
        for (size_t k = 0; k < gp.rows.size(); ++k) c.inputs.push_back(data(g({gp.N}), false));
      c.fn = [gp](const V& in) {
        const size_t groups = gp.rows.size();
        V b(in.begin() + 1, in.begin() + 1 + static_cast<int64_t>(groups));
        V bias = gp.bias ? V(in.begin() + 1 + static_cast<int64_t>(groups), in.end()) : V{};
        return V{ops::grouped_mm(in[0], gp.rows, b, gp.trans_b, bias)};
      };
      c.reference = [gp](const V& in) { return grouped_loop(gp, in); };
      out.push_back(std::move(c));
      // The weight gradients: a_g^T . b_g per group.
      Case tn;
      tn.op = "ops::grouped_mm_tn";
      tn.shape = label({str_cat("a", shape_label({m, gp.K}, gp.la), " b", shape_label({m, gp.N})),
                        "rows" + shape_label(gp.rows)});
      tn.dtype = t;
      tn.inputs = {laid_out({m, gp.K}, gp.la, g, false), data(g({m, gp.N}), false)};
      tn.fn = [gp](const V& in) { return ops::grouped_mm_tn(in[0], in[1], gp.rows); };
      tn.reference = [gp](const V& in) {
        V outs;
        int64_t at = 0;
        for (int64_t r : gp.rows) {
          outs.push_back(ops::mm(ops::transpose(ops::narrow(in[0], 0, at, r), 0, 1),
                                 ops::narrow(in[1], 0, at, r)));
          at += r;
        }
        return outs;
      };
      out.push_back(std::move(tn));
    }
  }
}

}  // namespace

void add_linalg_cases(std::vector<Case>& out) {
  Values v(505);
  products(out, v, "ops::mm", &raw_mm, kMm, false);
  products(out, v, "ops::bmm", &raw_bmm, kBmm, false);
  products(out, v, "ops::matmul", &raw_matmul, kMatmul, false);
  products(out, v, "mm", &grad_mm, kMm, true);
  products(out, v, "bmm", &grad_bmm, kBmm, true);
  products(out, v, "matmul", &grad_matmul, kMatmul, true);
  linears(out, v, false);
  linears(out, v, true);
  grouped(out, v);
}

}  // namespace qk::harness

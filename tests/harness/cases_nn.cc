// Softmax, losses, dropout and embeddings (qk/tensor/ops/nn.h and their
// differentiable forms). Dropout runs from a fixed generator, and its f64
// reference rebuilds the mask from qk::philox4x32 on the host, so every
// backend must reproduce the same Philox stream.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/nn.h"
#include "qk/tensor/ops/view.h"

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

constexpr uint64_t kDropoutSeed = 0xd70;

// The mask ops::dropout documents: element i kept iff the top 24 bits of
// word i % 4 of philox4x32(seed, i / 4) are below (1 - p) 2^24 (offset 0: a
// fresh generator), scaled by 1 / (1 - p).
Tensor philox_dropout_mask(const Shape& s, double p, DType t, Device d) {
  const int64_t n = shape_numel(s);
  const uint32_t keep_below = static_cast<uint32_t>((1.0 - p) * 16777216.0);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  std::vector<double> m(static_cast<size_t>(n));
  uint32_t w[4];
  for (int64_t i = 0; i < n; ++i) {
    if (i % 4 == 0) philox4x32(kDropoutSeed, static_cast<uint64_t>(i / 4), w);
    m[i] = (w[i % 4] >> 8) < keep_below ? scale : 0.0;
  }
  return ops::to_device(ops::cast(from_vector<double>(m, s), t), d);
}

void softmaxes(std::vector<Case>& out, Values& v) {
  struct Soft {
    Shape shape;
    Layout layout;
    int64_t dim;
  };
  const std::vector<Soft> softs = {
      {{7, 13}, Layout::contiguous, -1},   {{7, 13}, Layout::transposed, 0},
      {{2, 1031}, Layout::contiguous, 1},  {{3, 5, 7}, Layout::sliced, 1},
      {{3, 5, 7}, Layout::expanded, 2},    {{0, 5}, Layout::contiguous, 1},
      {{67, 129}, Layout::contiguous, -1}, {{129, 67}, Layout::transposed, 0}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -4, 4); };
    for (const Soft& s : softs) {
      const std::string sh = label({shape_label(s.shape, s.layout), str_cat("dim=", s.dim)});
      const int64_t dim = s.dim;
      for (bool log : {false, true}) {
        out.push_back(make(log ? "log_softmax" : "softmax", sh, t, {laid_out(s.shape, s.layout, g)},
                           [dim, log](const V& a) {
                             return V{log ? log_softmax(a[0], dim) : softmax(a[0], dim)};
                           }));
        out.back().covers = {log ? "ops::log_softmax_backward" : "ops::softmax_backward"};
        out.push_back(make(log ? "ops::log_softmax" : "ops::softmax", sh, t,
                           {laid_out(s.shape, s.layout, g, false)}, [dim, log](const V& a) {
                             return V{log ? ops::log_softmax(a[0], dim) : ops::softmax(a[0], dim)};
                           }));
        out.push_back(
            make(log ? "ops::log_softmax_backward" : "ops::softmax_backward", sh, t,
                 {laid_out(s.shape, s.layout, g, false), laid_out(s.shape, s.layout, g, false)},
                 [dim, log](const V& a) {
                   Tensor y = log ? ops::log_softmax(a[1], dim) : ops::softmax(a[1], dim);
                   return V{log ? ops::log_softmax_backward(a[0], y, dim)
                                : ops::softmax_backward(a[0], y, dim)};
                 }));
      }
    }
    // Values far beyond exp's range in f32 (|x| > 88): the max must come off first.
    Gen big = [&v, t](const Shape& s) { return v.uniform(s, t, -300, 300); };
    for (bool log : {false, true}) {
      out.push_back(make(log ? "log_softmax" : "softmax", "[7,13] |x|<300 dim=-1", t,
                         {laid_out({7, 13}, Layout::contiguous, big)}, [log](const V& a) {
                           return V{log ? log_softmax(a[0], -1) : softmax(a[0], -1)};
                         }));
    }
  }
}

// Class targets with one ignored entry (ignore_index -100) when n > 1.
Tensor targets(Values& v, const Shape& s, int64_t classes, DType it) {
  std::vector<int64_t> t = v.index(s, classes).to_vector<int64_t>();
  if (t.size() > 1) t[1] = -100;
  return ops::cast(from_vector<int64_t>(t, s), it);
}

void losses(std::vector<Case>& out, Values& v) {
  struct Ce {
    Shape logits, target;
    Layout layout;
    DType it;
    double smoothing;
    Reduction red;
  };
  const std::vector<Ce> ces = {
      {{7, 13}, {7}, Layout::contiguous, DType::i64, 0, Reduction::mean},
      {{7, 13}, {7}, Layout::transposed, DType::i32, 0.1, Reduction::sum},
      {{7, 13}, {7}, Layout::sliced, DType::i64, 0, Reduction::none},
      {{2, 5, 3, 3}, {2, 3, 3}, Layout::contiguous, DType::i64, 0.2, Reduction::mean},
      {{3, 1031}, {3}, Layout::contiguous, DType::i64, 0, Reduction::mean},
      {{129, 67}, {129}, Layout::contiguous, DType::i64, 0.1, Reduction::mean},
      {{0, 5}, {0}, Layout::contiguous, DType::i64, 0, Reduction::sum}};
  const char* red_names[] = {"none", "mean", "sum"};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.uniform(s, t, -3, 3); };
    for (const Ce& ce : ces) {
      const std::string sh =
          label({shape_label(ce.logits, ce.layout), dtype_name(ce.it),
                 str_cat("smoothing=", ce.smoothing), red_names[static_cast<int>(ce.red)]});
      const Ce p = ce;
      Case c = make(
          "cross_entropy", sh, t,
          {laid_out(ce.logits, ce.layout, g), index(targets(v, ce.target, ce.logits[1], ce.it))},
          [p](const V& a) { return V{cross_entropy(a[0], a[1], -100, p.smoothing, p.red)}; });
      c.covers = {"ops::cross_entropy", "ops::cross_entropy_backward"};
      out.push_back(std::move(c));
      out.push_back(make("ops::cross_entropy", sh, t,
                         {laid_out(ce.logits, ce.layout, g, false),
                          index(targets(v, ce.target, ce.logits[1], ce.it))},
                         [p](const V& a) {
                           auto r = ops::cross_entropy(a[0], a[1], -100, p.smoothing, p.red);
                           Tensor gl =
                               ops::binary_scalar(BinaryOp::add, ops::mul(r.loss, r.loss), 0.5);
                           Tensor dx = ops::cross_entropy_backward(gl, r.log_probs, a[1], -100,
                                                                   p.smoothing, p.red);
                           return V{r.loss, r.log_probs, dx};
                         }));
      out.back().covers = {"ops::cross_entropy_backward"};
    }
    Gen big = [&v, t](const Shape& s) { return v.uniform(s, t, -300, 300); };
    out.push_back(
        make("cross_entropy", "[7,13] |x|<300", t,
             {laid_out({7, 13}, Layout::contiguous, big), index(targets(v, {7}, 13, DType::i64))},
             [](const V& a) { return V{cross_entropy(a[0], a[1])}; }));
    for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
      out.push_back(
          make("mse_loss", label({"[7,13]T,[7,13]", red_names[static_cast<int>(red)]}), t,
               {laid_out({7, 13}, Layout::transposed, g), laid_out({7, 13}, Layout::contiguous, g)},
               [red](const V& a) { return V{mse_loss(a[0], a[1], red)}; }));
    }
  }
}

void dropouts(std::vector<Case>& out, Values& v) {
  const std::vector<std::pair<Shape, Layout>> shapes = {{{7, 13}, Layout::contiguous},
                                                        {{7, 13}, Layout::transposed},
                                                        {{1031}, Layout::contiguous},
                                                        {{0, 5}, Layout::contiguous}};
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (const auto& [shape, layout] : shapes) {
      for (double p : {0.3, 0.9}) {
        const std::string sh = label({shape_label(shape, layout), str_cat("p=", p)});
        // The reference: the same op through the host Philox function.
        OpFn reference = [p](const V& a) {
          Tensor m = philox_dropout_mask(a[0].shape(), p, a[0].dtype(), a[0].device());
          return V{mul(a[0], m)};
        };
        Case c = make("dropout", sh, t, {laid_out(shape, layout, g)}, [p](const V& a) {
          Generator gen(kDropoutSeed);
          return V{dropout(a[0], p, true, gen)};
        });
        c.reference = reference;
        out.push_back(std::move(c));
        Case r = make("ops::dropout", sh, t, {laid_out(shape, layout, g, false)}, [p](const V& a) {
          Generator gen(kDropoutSeed);
          auto [y, m] = ops::dropout(a[0], p, gen);
          return V{y, m};
        });
        r.reference = [p](const V& a) {
          Tensor m = philox_dropout_mask(a[0].shape(), p, a[0].dtype(), a[0].device());
          return V{ops::mul(a[0], m), m};
        };
        out.push_back(std::move(r));
      }
    }
    out.push_back(make("dropout", "[7,13] p=0.5 eval", t,
                       {laid_out({7, 13}, Layout::contiguous, g)},
                       [](const V& a) { return V{dropout(a[0], 0.5, false)}; }));
  }
}

void embeddings(std::vector<Case>& out, Values& v) {
  for (DType t : kFloating) {
    Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
    for (DType it : {DType::i64, DType::i32}) {
      for (int64_t pad : {-1, 3}) {
        const std::string sh =
            label({"w[13,5]T idx[2,7]", dtype_name(it), pad >= 0 ? "padding_idx=3" : ""});
        Case c = make("embedding", sh, t,
                      {laid_out({13, 5}, Layout::transposed, g), index(v.index({2, 7}, 13, it))},
                      [pad](const V& a) { return V{embedding(a[0], a[1], pad)}; });
        c.covers = {"ops::embedding_backward"};
        // The padding row is used forward but gets no gradient, by definition.
        c.gradcheck = pad < 0;
        out.push_back(std::move(c));
        out.push_back(
            make("ops::embedding_backward", sh, t,
                 {laid_out({2, 7, 5}, Layout::sliced, g, false), index(v.index({2, 7}, 13, it))},
                 [pad](const V& a) { return V{ops::embedding_backward(a[0], a[1], 13, pad)}; }));
      }
      out.push_back(
          make("ops::embedding", label({"w[13,5] idx[2,7]", dtype_name(it)}), t,
               {laid_out({13, 5}, Layout::contiguous, g, false), index(v.index({2, 7}, 13, it))},
               [](const V& a) { return V{ops::embedding(a[0], a[1])}; }));
    }
    out.push_back(make("embedding", "w[1031,3] idx[0]", t,
                       {laid_out({1031, 3}, Layout::contiguous, g), index(v.index({0}, 1031))},
                       [](const V& a) { return V{embedding(a[0], a[1])}; }));
    // Many rows into few: the backward's accumulation of duplicates.
    out.push_back(make("embedding", "w[13,33] idx[64,33]", t,
                       {laid_out({13, 33}, Layout::contiguous, g), index(v.index({64, 33}, 13))},
                       [](const V& a) { return V{embedding(a[0], a[1])}; }));
    out.push_back(make("embedding", "w[4,8] idx[8192]", t,
                       {laid_out({4, 8}, Layout::contiguous, g), index(v.index({8192}, 4))},
                       [](const V& a) { return V{embedding(a[0], a[1])}; }));
    out.push_back(make("embedding", "w[1031,3] idx[4,13]", t,
                       {laid_out({1031, 3}, Layout::contiguous, g), index(v.index({4, 13}, 1031))},
                       [](const V& a) { return V{embedding(a[0], a[1])}; }));
  }
}

}  // namespace

void add_nn_cases(std::vector<Case>& out) {
  Values v(707);
  softmaxes(out, v);
  losses(out, v);
  dropouts(out, v);
  embeddings(out, v);
}

}  // namespace qk::harness

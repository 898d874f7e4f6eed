// Batch, layer and RMS normalisation (qk/tensor/ops/norm.h and the
// differentiable forms): with and without affine parameters, training and
// evaluation, the running statistics' in-place update, strided and odd inputs.
#include "harness/case_builders.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/ops/norm.h"

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

void batch_norms(std::vector<Case>& out, Values& v, DType t) {
  Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
  Gen var = [&v, t](const Shape& s) { return v.positive(s, t); };
  struct Bn {
    Shape x;
    Layout layout;
    bool affine, training, running;
  };
  const std::vector<Bn> bns = {{{4, 3, 5, 5}, Layout::contiguous, true, true, true},
                               {{4, 3, 5, 5}, Layout::transposed, false, true, false},
                               {{7, 13}, Layout::contiguous, true, true, true},
                               {{2, 3, 7}, Layout::sliced, true, false, true},
                               {{2, 1031, 2}, Layout::contiguous, true, true, true},
                               {{8, 16, 9, 9}, Layout::contiguous, true, true, true},
                               {{4, 3, 5, 5}, Layout::channels_last, true, true, true},
                               {{8, 16, 9, 9}, Layout::channels_last, true, false, true}};
  for (const Bn& b : bns) {
    const int64_t ch = b.x[1];
    const std::string sh = label({shape_label(b.x, b.layout), b.affine ? "affine" : "",
                                  b.training ? "train" : "eval", b.running ? "running" : ""});
    auto inputs = [&](bool grad) {
      return std::vector<Input>{laid_out(b.x, b.layout, g, grad),
                                b.affine ? laid_out({ch}, Layout::contiguous, g, grad) : none(),
                                b.affine ? laid_out({ch}, Layout::contiguous, g, grad) : none(),
                                b.running ? data(g({ch}), false) : none(),
                                b.running ? data(var({ch}), false) : none()};
    };
    const bool training = b.training;
    // The running statistics are outputs too: they are updated in place.
    Case c = make("batch_norm", sh, t, inputs(true), [training](const V& a) {
      Tensor y = batch_norm(a[0], a[1], a[2], a[3], a[4], training, 0.1, 1e-5);
      return V{y, a[3], a[4]};
    });
    c.covers = {"ops::batch_norm_backward"};
    out.push_back(std::move(c));
    out.push_back(make("ops::batch_norm", sh, t, inputs(false), [training](const V& a) {
      auto r = ops::batch_norm(a[0], a[1], a[2], a[3], a[4], training, 0.1, 1e-5);
      return V{r.out, r.save_mean, r.save_invstd, a[3], a[4]};
    }));
    out.push_back(make(
        "ops::batch_norm_backward", sh, t,
        [&] {
          std::vector<Input> in = inputs(false);
          in.push_back(laid_out(b.x, Layout::contiguous, g, false));
          return in;
        }(),
        [training](const V& a) {
          auto r = ops::batch_norm(a[0], a[1], a[2], a[3], a[4], training, 0.1, 1e-5);
          auto [dx, dw, db] =
              ops::batch_norm_backward(a[5], a[0], a[1], r.save_mean, r.save_invstd, training);
          return V{dx, dw, db};
        }));
  }
}

void layer_norms(std::vector<Case>& out, Values& v, DType t, bool rms) {
  Gen g = [&v, t](const Shape& s) { return v.data(s, t); };
  struct Ln {
    Shape x, norm;
    Layout layout;
    bool weight, bias;
  };
  const std::vector<Ln> lns = {{{7, 13}, {13}, Layout::contiguous, true, true},
                               {{7, 13}, {13}, Layout::transposed, true, false},
                               {{2, 5, 7}, {5, 7}, Layout::sliced, false, false},
                               {{3, 1031}, {1031}, Layout::contiguous, true, true},
                               {{0, 13}, {13}, Layout::contiguous, true, true},
                               {{2, 3, 13}, {13}, Layout::expanded, true, true},
                               {{129, 67}, {67}, Layout::contiguous, true, true}};
  const std::string name = rms ? "rms_norm" : "layer_norm";
  for (const Ln& l : lns) {
    if (rms && !l.weight && l.bias) continue;
    const std::string sh = label({shape_label(l.x, l.layout), str_cat("norm", shape_label(l.norm)),
                                  l.weight ? "weight" : "", l.bias && !rms ? "bias" : ""});
    const Shape ns = l.norm;
    auto inputs = [&](bool grad) {
      std::vector<Input> in{laid_out(l.x, l.layout, g, grad),
                            l.weight ? laid_out(l.norm, Layout::contiguous, g, grad) : none()};
      if (!rms) in.push_back(l.bias ? laid_out(l.norm, Layout::contiguous, g, grad) : none());
      return in;
    };
    Case c = make(name, sh, t, inputs(true), [ns, rms](const V& a) {
      return V{rms ? rms_norm(a[0], ns, a[1], 1e-6) : layer_norm(a[0], ns, a[1], a[2], 1e-5)};
    });
    c.covers = {rms ? "ops::rms_norm_backward" : "ops::layer_norm_backward"};
    out.push_back(std::move(c));
    out.push_back(make(str_cat("ops::", name), sh, t, inputs(false), [ns, rms](const V& a) {
      if (rms) {
        auto [y, rstd] = ops::rms_norm(a[0], ns, a[1], 1e-6);
        return V{y, rstd};
      }
      auto [y, mean, rstd] = ops::layer_norm(a[0], ns, a[1], a[2], 1e-5);
      return V{y, mean, rstd};
    }));
    std::vector<Input> bin = inputs(false);
    bin.push_back(laid_out(
        l.x, Layout::transposed == l.layout ? Layout::contiguous : Layout::transposed, g, false));
    out.push_back(
        make(str_cat("ops::", name, "_backward"), sh, t, std::move(bin), [ns, rms](const V& a) {
          if (rms) {
            auto [y, rstd] = ops::rms_norm(a[0], ns, a[1], 1e-6);
            auto [dx, dw] = ops::rms_norm_backward(a[2], a[0], ns, rstd, a[1]);
            return V{dx, dw};
          }
          auto [y, mean, rstd] = ops::layer_norm(a[0], ns, a[1], a[2], 1e-5);
          auto [dx, dw, db] = ops::layer_norm_backward(a[3], a[0], ns, mean, rstd, a[1]);
          return V{dx, dw, db};
        }));
  }
}

}  // namespace

void add_norm_cases(std::vector<Case>& out) {
  Values v(808);
  for (DType t : kFloating) {
    batch_norms(out, v, t);
    layer_norms(out, v, t, false);
    layer_norms(out, v, t, true);
  }
}

}  // namespace qk::harness

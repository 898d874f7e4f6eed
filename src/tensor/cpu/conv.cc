// CPU convolution: geometry, the bias gradient, and the choice between
// oneDNN and im2col (see Note [Conv algorithm choice] in conv.h).
#include "tensor/cpu/conv.h"

#include <string>

#include "qk/base/env.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "tensor/cpu/onednn.h"

namespace qk::cpu {

QK_ENV_STRING(env_conv_algo, "QK_CONV_ALGO", "auto",
              "CPU conv2d algorithm: auto (per-shape rule), onednn, onednn_plain or im2col.");

ConvGeom conv_geom(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  ConvGeom g{};
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.o = w.size(0), g.kh = w.size(2), g.kw = w.size(3), g.g = p.groups;
  g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.ho = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::onednn: return "onednn";
    case ConvAlgo::onednn_plain: return "onednn_plain";
    default: return "im2col";
  }
}

ConvAlgo conv_algo_for(const ConvGeom& g, DType dt, ConvPhase phase) {
  if (!onednn::supports(dt)) return ConvAlgo::im2col;
  const std::string& forced = env_conv_algo.get();
  if (forced == "onednn") return ConvAlgo::onednn;
  if (forced == "onednn_plain") return ConvAlgo::onednn_plain;
  if (forced == "im2col") return ConvAlgo::im2col;
  QK_CHECK(forced == "auto", "QK_CONV_ALGO must be auto, onednn, onednn_plain or im2col, got '",
           forced, "'");
  // See Note [Conv algorithm choice]. im2col has no reduced-float kernels.
  if (dt != DType::f32) return ConvAlgo::onednn;
  if (g.cg() < 8) return phase == ConvPhase::forward ? ConvAlgo::onednn_plain : ConvAlgo::im2col;
  return ConvAlgo::onednn;
}

Tensor conv2d_bias_grad(const Tensor& grad_out) {
  // [N,O,Ho,Wo] -> [O]: per-channel sums, f64 accumulation for every dtype.
  const int64_t n = grad_out.size(0), o = grad_out.size(1);
  const int64_t hw = grad_out.size(2) * grad_out.size(3);
  Tensor db = empty({o}, TensorOptions(grad_out.dtype()).device(grad_out.device()));
  Tensor go = grad_out.is_contiguous() ? grad_out : ops::contiguous(grad_out);
  dispatch_floating(go.dtype(), "conv2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* src = go.data_ptr<T>();
    T* dst = db.data_ptr<T>();
    parallel_for(0, o, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = src + (i * o + c) * hw;
          compute_t<T> part = 0;
          for (int64_t k = 0; k < hw; ++k) part += static_cast<compute_t<T>>(row[k]);
          acc += part;
        }
        dst[c] = cast_value<T>(acc);
      }
    });
  });
  return db;
}

namespace {
Tensor to_f32(const Tensor& t) { return t.defined() ? ops::cast(t, DType::f32) : t; }
Tensor from_f32(const Tensor& t, DType dt) { return t.defined() ? ops::cast(t, dt) : t; }
// f16/bf16 without native oneDNN kernels here: computed in f32, rounded once.
bool via_f32(DType dt) {
  return is_reduced_float(dt) && (!onednn::supports(dt) || env_conv_algo.get() == "im2col");
}
}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ops::Conv2dParams& p) {
  if (via_f32(x.dtype()))
    return ops::cast(conv2d_forward(to_f32(x), to_f32(w), to_f32(b), p), x.dtype());
  ConvGeom g = conv_geom(x, w, p);
  switch (conv_algo_for(g, x.dtype(), ConvPhase::forward)) {
    case ConvAlgo::onednn: return onednn::conv2d_forward(x, w, b, g, onednn::Layout::blocked);
    case ConvAlgo::onednn_plain: return onednn::conv2d_forward(x, w, b, g, onednn::Layout::plain);
    default: return conv2d_forward_im2col(x, w, b, p);
  }
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const ops::Conv2dParams& p,
                                                   bool need_dx, bool need_dw, bool need_db) {
  if (via_f32(x.dtype())) {
    auto [dx, dw, db] = conv2d_backward(to_f32(grad_out), to_f32(x), to_f32(w), p, need_dx,
                                        need_dw, need_db);
    return {from_f32(dx, x.dtype()), from_f32(dw, x.dtype()), from_f32(db, x.dtype())};
  }
  ConvGeom g = conv_geom(x, w, p);
  switch (conv_algo_for(g, x.dtype(), ConvPhase::backward)) {
    case ConvAlgo::onednn:
      return onednn::conv2d_backward(grad_out, x, w, g, need_dx, need_dw, need_db,
                                     onednn::Layout::blocked);
    case ConvAlgo::onednn_plain:
      return onednn::conv2d_backward(grad_out, x, w, g, need_dx, need_dw, need_db,
                                     onednn::Layout::plain);
    default: return conv2d_backward_im2col(grad_out, x, w, p, need_dx, need_dw, need_db);
  }
}

}  // namespace qk::cpu

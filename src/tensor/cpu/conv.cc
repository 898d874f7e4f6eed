// CPU convolution: geometry, the bias gradient, and the choice between
// oneDNN and im2col (see Note [Conv algorithm choice] in conv.h).
#include "cpu/conv.h"

#include <string>

#include "qk/base/env.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/onednn.h"

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
  // Channels last: a column sum over [N*Ho*Wo, O] (reduce.cc).
  if (ops::is_channels_last(grad_out)) return ops::sum(grad_out, {0, 2, 3}, false);
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
  const bool cl = ops::is_channels_last(x);
  switch (conv_algo_for(g, x.dtype(), ConvPhase::forward)) {
    case ConvAlgo::onednn:
      return onednn::conv2d_forward(x, w, b, g, cl ? onednn::Layout::channels_last : onednn::Layout::blocked);
    case ConvAlgo::onednn_plain:
      return onednn::conv2d_forward(x, w, b, g, cl ? onednn::Layout::channels_last : onednn::Layout::plain);
    default:
      if (!cl) return conv2d_forward_im2col(x, w, b, p);
      // im2col reads planes: through NCHW and back.
      return ops::contiguous(conv2d_forward_im2col(ops::contiguous(x), w, b, p),
                             ops::MemoryFormat::channels_last);
  }
}

namespace {
// One plane of the epilogue, the flags known at compile time so that the loop
// vectorises.
template <typename T, bool kAffine, bool kResidual, bool kRelu>
void epilogue_row(T* row, const T* r, compute_t<T> s, compute_t<T> t, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) {
    C v = static_cast<C>(row[i]);
    if constexpr (kAffine) v = v * s + t;
    if constexpr (kResidual) v += static_cast<C>(r[i]);
    if constexpr (kRelu) v = v > C(0) ? v : C(0);
    row[i] = cast_value<T>(v);
  }
}

// y = relu?(y * scale + shift + residual) in place, one pass: the part of
// conv2d_fused's epilogue oneDNN did not take.
void apply_epilogue(const Tensor& y, const Tensor& scale, const Tensor& shift,
                    const Tensor& residual, bool relu) {
  const int64_t n = y.size(0), o = y.size(1), hw = y.size(2) * y.size(3);
  dispatch_floating(y.dtype(), "conv2d_fused", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    T* yp = y.data_ptr<T>();
    const T* sp = scale.defined() ? scale.data_ptr<T>() : nullptr;
    const T* tp = shift.defined() ? shift.data_ptr<T>() : nullptr;
    const T* rp = residual.defined() ? residual.data_ptr<T>() : nullptr;
    using RowFn = void (*)(T*, const T*, C, C, int64_t);
    static constexpr RowFn rows[8] = {
        epilogue_row<T, false, false, false>, epilogue_row<T, true, false, false>,
        epilogue_row<T, false, true, false>,  epilogue_row<T, true, true, false>,
        epilogue_row<T, false, false, true>,  epilogue_row<T, true, false, true>,
        epilogue_row<T, false, true, true>,   epilogue_row<T, true, true, true>};
    const RowFn fn = rows[(sp ? 1 : 0) | (rp ? 2 : 0) | (relu ? 4 : 0)];
    parallel_for(0, n * o, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t c = plane % o;
        fn(yp + plane * hw, rp ? rp + plane * hw : nullptr, sp ? static_cast<C>(sp[c]) : C(1),
           tp ? static_cast<C>(tp[c]) : C(0), hw);
      }
    });
  });
}
}  // namespace

Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                    const Tensor& scale, const Tensor& shift, const Tensor& residual, bool relu) {
  if (!via_f32(x.dtype())) {
    ConvGeom g = conv_geom(x, w, p);
    const ConvAlgo algo = conv_algo_for(g, x.dtype(), ConvPhase::forward);
    if (algo != ConvAlgo::im2col) {
      // Blocked layout even where the plain conv2d uses NCHW (few input
      // channels): oneDNN's NCHW kernel applies post-ops element by element,
      // ~50x slower. The ReLU goes inside only when there is no residual to
      // add first.
      onednn::Epilogue epi{scale, shift, relu && !residual.defined()};
      Tensor wk = w, bk = b;
      if (scale.defined() && onednn::winograd_chosen(g, x.dtype(), epi.relu)) {
        // Winograd takes no per-channel post-ops: fold the affine map into
        // the weights and bias instead (w * scale[o], b * scale[o] + shift[o]).
        // Only where oneDNN then picks Winograd: folding costs a pass over
        // the weights, 2x the whole batch-1 latency of ResNet.
        const int64_t o = w.size(0);
        wk = ops::mul(w, ops::reshape(scale, {o, 1, 1, 1}));
        bk = b.defined() ? ops::add(ops::mul(b, scale), shift) : shift;
        epi.scale = epi.shift = Tensor();
      }
      Tensor y = onednn::conv2d_forward_fused(x, wk, bk, g, onednn::Layout::blocked, epi);
      if (y.defined()) {
        if (residual.defined()) apply_epilogue(y, Tensor(), Tensor(), residual, relu);
        return y;
      }
    }
  }
  Tensor y = conv2d_forward(x, w, b, p);
  apply_epilogue(y, scale, shift, residual, relu);
  return y;
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
  // Channels last: x and grad_out both (the front sees to it), dx in it too.
  const bool cl = ops::is_channels_last(x);
  switch (conv_algo_for(g, x.dtype(), ConvPhase::backward)) {
    case ConvAlgo::onednn:
      return onednn::conv2d_backward(grad_out, x, w, g, need_dx, need_dw, need_db,
                                     cl ? onednn::Layout::channels_last : onednn::Layout::blocked);
    case ConvAlgo::onednn_plain:
      return onednn::conv2d_backward(grad_out, x, w, g, need_dx, need_dw, need_db,
                                     cl ? onednn::Layout::channels_last : onednn::Layout::plain);
    default: {
      if (!cl) return conv2d_backward_im2col(grad_out, x, w, p, need_dx, need_dw, need_db);
      auto [dx, dw, db] = conv2d_backward_im2col(ops::contiguous(grad_out), ops::contiguous(x), w, p,
                                                 need_dx, need_dw, need_db);
      return {ops::contiguous(dx, ops::MemoryFormat::channels_last), dw, db};
    }
  }
}

}  // namespace qk::cpu

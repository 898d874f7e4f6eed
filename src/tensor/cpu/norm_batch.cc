// Batch normalisation on the CPU: x [N, C, S], statistics per channel c over
// the N*S elements x[n, c, :]. Parallel over channels; each channel's rows are
// contiguous runs of S values.
//
// Forward (training) reads x twice: one fused pass for sum and sum of squares
// (shifted by the channel's first value, so a large mean does not cancel the
// variance away), then out = x * scale + shift with the per-channel
// scale = invstd * w and shift = b - mean * scale.
// Backward reads (dy, x) twice: sums of dy and dy * (x - mean), then
// dx = dy * k1 + x * k2 + k3 with per-channel constants.
#include <cmath>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/norm.h"
#include "cpu/norm_lanes.h"
#include "batch_channel_spatial.h"

namespace qk::cpu {
namespace {

// One channel's shifted sums over its N rows of S: float lanes kept across
// rows, flushed into double every ~1024 values per lane, so that long
// channels (N*S in the millions) stay accurate.
template <typename T, typename A>
void channel_moments(const T* x, NCS d, int64_t c, double& mean, double& var) {
  const int64_t M = d.N * d.S;
  const A shift = ld<A>(x, c * d.S);
  LaneSums2<A> acc;
  for (int64_t n = 0; n < d.N; ++n) acc.add_moments(x + (n * d.C + c) * d.S, d.S, shift);
  acc.flush();
  const double s1 = acc.s1, s2 = acc.s2;
  double m = s1 / M;
  mean = shift + m;
  var = std::max(0.0, s2 / M - m * m);
}

template <typename T>
ops::BatchNormResult batch_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     bool training, double momentum, double eps) {
  using A = acc_t<T>;
  const NCS d = ncs_of(x);
  const DType adt = dtype_of_v<A>;
  const auto w = param_values<A>(weight);
  const auto b = param_values<A>(bias);
  Tensor out = empty(x.shape(), x.dtype());
  Tensor save_mean = empty({d.C}, adt), save_invstd = empty({d.C}, adt);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  A* mp = save_mean.data_ptr<A>();
  A* ip = save_invstd.data_ptr<A>();
  std::vector<double> batch_var(training ? d.C : 0);
  std::vector<A> rm, rv;
  if (!training) {
    rm = param_values<A>(running_mean);
    rv = param_values<A>(running_var);
  }

  parallel_for(0, d.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double mean, var;
      if (training) {
        channel_moments<T, A>(xp, d, c, mean, var);
        batch_var[c] = var;
      } else {
        mean = rm[c];
        var = rv[c];
      }
      const double invstd = 1.0 / std::sqrt(var + eps);
      mp[c] = static_cast<A>(mean);
      ip[c] = static_cast<A>(invstd);
      const double scale_d = invstd * (w.empty() ? 1.0 : double(w[c]));
      const A scale = static_cast<A>(scale_d);
      const A shift = static_cast<A>((b.empty() ? 0.0 : double(b[c])) - mean * scale_d);
      for (int64_t n = 0; n < d.N; ++n) {
        const int64_t base = (n * d.C + c) * d.S;
        const T* xr = xp + base;
        T* orow = op + base;
        for (int64_t i = 0; i < d.S; ++i) st(orow, i, ld<A>(xr, i) * scale + shift);
      }
    }
  });

  // PyTorch's update: running = (1 - momentum) * running + momentum * batch,
  // with the unbiased (Bessel-corrected) batch variance.
  if (training && running_mean.defined()) {
    auto rmv = running_mean.to_vector<double>();
    auto means = save_mean.to_vector<double>();
    for (int64_t c = 0; c < d.C; ++c) rmv[c] = (1 - momentum) * rmv[c] + momentum * means[c];
    ops::copy_(running_mean, from_vector<double>(rmv, {d.C}, DType::f64));
  }
  if (training && running_var.defined()) {
    const double M = static_cast<double>(d.N * d.S);
    auto rvv = running_var.to_vector<double>();
    for (int64_t c = 0; c < d.C; ++c)
      rvv[c] = (1 - momentum) * rvv[c] + momentum * batch_var[c] * M / (M - 1);
    ops::copy_(running_var, from_vector<double>(rvv, {d.C}, DType::f64));
  }
  return {out, save_mean, save_invstd};
}

template <typename T>
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_impl(const Tensor& grad_out, const Tensor& x,
                                                            const Tensor& weight,
                                                            const Tensor& save_mean,
                                                            const Tensor& save_invstd,
                                                            bool training) {
  using A = acc_t<T>;
  const NCS d = ncs_of(x);
  const auto w = param_values<A>(weight);
  const auto means = param_values<double>(save_mean);
  const auto invstds = param_values<double>(save_invstd);
  Tensor dx = empty(x.shape(), x.dtype());
  std::vector<double> dw(d.C), db(d.C);
  const T* xp = x.data_ptr<T>();
  const T* gp = grad_out.data_ptr<T>();
  T* dxp = dx.data_ptr<T>();
  const double M = static_cast<double>(d.N * d.S);

  parallel_for(0, d.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const double mean = means[c], invstd = invstds[c];
      const double wc = w.empty() ? 1.0 : double(w[c]);
      LaneSums2<A> acc;  // sum dy, sum dy * (x - mean)
      for (int64_t n = 0; n < d.N; ++n) {
        const int64_t base = (n * d.C + c) * d.S;
        acc.add_dot(gp + base, xp + base, d.S, static_cast<A>(mean));
      }
      acc.flush();
      const double sdy = acc.s1, sdyx = acc.s2;
      dw[c] = sdyx * invstd;
      db[c] = sdy;
      // training: dx = w*invstd * (dy - sdy/M - (x-mean) * invstd^2 * sdyx/M)
      // eval:     dx = w*invstd * dy
      const double k1 = wc * invstd;
      const double k2 = training ? -k1 * invstd * invstd * sdyx / M : 0.0;
      const double k3 = training ? -k1 * sdy / M - mean * k2 : 0.0;
      const A a1 = static_cast<A>(k1), a2 = static_cast<A>(k2), a3 = static_cast<A>(k3);
      for (int64_t n = 0; n < d.N; ++n) {
        const int64_t base = (n * d.C + c) * d.S;
        const T* g = gp + base;
        const T* xr = xp + base;
        T* o = dxp + base;
        for (int64_t i = 0; i < d.S; ++i) st(o, i, ld<A>(g, i) * a1 + ld<A>(xr, i) * a2 + a3);
      }
    }
  });

  const DType pdt = weight.defined() ? weight.dtype() : x.dtype();
  Tensor dweight;
  if (weight.defined()) dweight = ops::cast(from_vector<double>(dw, {d.C}, DType::f64), pdt);
  Tensor dbias = ops::cast(from_vector<double>(db, {d.C}, DType::f64), pdt);
  return {dx, dweight, dbias};
}

}  // namespace

ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& running_mean, const Tensor& running_var,
                                bool training, double momentum, double eps) {
  return dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    return batch_norm_impl<decltype(tag)>(x, weight, bias, running_mean, running_var, training,
                                          momentum, eps);
  });
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight,
                                                       const Tensor& save_mean,
                                                       const Tensor& save_invstd, bool training) {
  return dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    return batch_norm_backward_impl<decltype(tag)>(grad_out, x, weight, save_mean, save_invstd,
                                                   training);
  });
}

}  // namespace qk::cpu

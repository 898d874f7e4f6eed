// Layer and RMS normalisation on the CPU: x [M, D], one row per position,
// statistics over the D trailing elements. Rows run in parallel; a row is
// read twice (statistics, then the write), the second time from L1/L2.
// The backward sums dweight/dbias into one partial buffer per block of rows
// (no atomics), then adds the partials.
#include <cmath>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/norm.h"
#include "cpu/norm_lanes.h"

namespace qk::cpu {
namespace {

int64_t norm_numel(const Shape& s) { return shape_numel(s); }

// mean/rstd keep x's leading dims and 1 for each normalised dim (PyTorch's layout).
Shape stat_shape(const Tensor& x, const Shape& normalized_shape) {
  Shape s(x.shape().begin(), x.shape().end() - static_cast<int64_t>(normalized_shape.size()));
  s.resize(x.shape().size(), 1);
  return s;
}

// Rows per parallel task: about 16K elements each.
int64_t row_grain(int64_t D) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)); }

template <typename A>
std::vector<A> param_or(const Tensor& t, int64_t D, A fill) {
  auto v = param_values<A>(t);
  if (v.empty()) v.assign(D, fill);
  return v;
}

int64_t num_blocks(int64_t M) { return std::max<int64_t>(1, std::min<int64_t>(num_threads(), M)); }

template <typename T>
std::tuple<Tensor, Tensor, Tensor> layer_norm_impl(const Tensor& x, const Shape& nshape,
                                                   const Tensor& weight, const Tensor& bias,
                                                   double eps) {
  using A = acc_t<T>;
  const int64_t D = norm_numel(nshape), M = D == 0 ? 0 : x.numel() / D;
  const auto w = param_or<A>(weight, D, A(1));
  const auto b = param_or<A>(bias, D, A(0));
  Tensor out = empty(x.shape(), x.dtype());
  Tensor mean = empty(stat_shape(x, nshape), dtype_of_v<A>);
  Tensor rstd = empty(stat_shape(x, nshape), dtype_of_v<A>);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  A* mp = mean.data_ptr<A>();
  A* rp = rstd.data_ptr<A>();
  const A* wp = w.data();
  const A* bp = b.data();
  parallel_for(0, M, row_grain(D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = xp + r * D;
      T* orow = op + r * D;
      // One pass for both moments, shifted by the row's first value so a
      // large mean does not cancel the variance.
      const A shift = ld<A>(xr, 0);
      A s1, s2;
      row_sum_sumsq<A>(xr, D, shift, s1, s2);
      const A m1 = s1 / static_cast<A>(D);
      const A mu = shift + m1;
      const A var = std::max(A(0), s2 / static_cast<A>(D) - m1 * m1);
      const A rs = static_cast<A>(1.0 / std::sqrt(static_cast<double>(var) + eps));
      mp[r] = mu;
      rp[r] = rs;
      for (int64_t i = 0; i < D; ++i) st(orow, i, (ld<A>(xr, i) - mu) * rs * wp[i] + bp[i]);
    }
  });
  return {out, mean, rstd};
}

// Sums per-block partials [nb, k*D] into k vectors of D, as tensors of `dt`.
template <typename A>
std::vector<Tensor> reduce_partials(const std::vector<A>& part, int64_t nb, int64_t k, int64_t D,
                                    const Shape& shape, DType dt) {
  std::vector<Tensor> outs;
  for (int64_t j = 0; j < k; ++j) {
    std::vector<double> acc(D, 0.0);
    for (int64_t blk = 0; blk < nb; ++blk) {
      const A* p = part.data() + (blk * k + j) * D;
      for (int64_t i = 0; i < D; ++i) acc[i] += p[i];
    }
    outs.push_back(ops::cast(from_vector<double>(acc, shape, DType::f64), dt));
  }
  return outs;
}

// dx = rstd * (g*w - ma - xhat*mb); dw += g*xhat; db += g. The restrict
// pointers let GCC vectorize without a runtime alias check (which it failed,
// running the scalar copy of the loop).
template <typename T, typename A>
inline void layer_norm_dx_row(const T* __restrict x, const T* __restrict g, const A* __restrict w,
                              T* __restrict dx, A* __restrict dw, A* __restrict db, int64_t D, A mu,
                              A rs, A ma, A mb) {
  for (int64_t k = 0; k < D; ++k) {
    const A xh = (ld<A>(x, k) - mu) * rs;
    const A gk = ld<A>(g, k);
    st(dx, k, rs * (gk * w[k] - ma - xh * mb));
    dw[k] += gk * xh;
    db[k] += gk;
  }
}

template <typename T>
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_impl(const Tensor& grad_out, const Tensor& x,
                                                            const Shape& nshape, const Tensor& mean,
                                                            const Tensor& rstd,
                                                            const Tensor& weight) {
  using A = acc_t<T>;
  const int64_t D = norm_numel(nshape), M = D == 0 ? 0 : x.numel() / D;
  const auto w = param_or<A>(weight, D, A(1));
  const auto mus = param_values<A>(mean);
  const auto rss = param_values<A>(rstd);
  Tensor dx = empty(x.shape(), x.dtype());
  const T* xp = x.data_ptr<T>();
  const T* gp = grad_out.data_ptr<T>();
  T* dxp = dx.data_ptr<T>();
  const A* wp = w.data();
  const int64_t nb = num_blocks(M);
  std::vector<A> part(static_cast<size_t>(nb * 2 * D), A(0));  // per block: dw[D], db[D]
  // Per row: a = sum g*w, b = sum g*w*xhat, then
  // dx = rstd * (g*w - a/D - xhat * b/D), dw += g*xhat, db += g
  // (xhat recomputed in the second pass: cheaper than storing it).
  parallel_for(0, nb, 1, [&](int64_t blo, int64_t bhi) {
    for (int64_t blk = blo; blk < bhi; ++blk) {
      int64_t lo, hi;
      block_range(M, nb, blk, lo, hi);
      A* dw = part.data() + blk * 2 * D;
      A* db = dw + D;
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * D;
        const T* g = gp + r * D;
        T* o = dxp + r * D;
        const A mu = mus[r], rs = rss[r];
        constexpr int L = kLanes<A>;
        A sa[L] = {}, sb[L] = {};
        int64_t i = 0;
        for (; i + L <= D; i += L)
          for (int j = 0; j < L; ++j) {
            const A gw = ld<A>(g, i + j) * wp[i + j];
            sa[j] += gw;
            sb[j] += gw * ((ld<A>(xr, i + j) - mu) * rs);
          }
        A a = 0, bsum = 0;
        for (; i < D; ++i) {
          const A gw = ld<A>(g, i) * wp[i];
          a += gw;
          bsum += gw * ((ld<A>(xr, i) - mu) * rs);
        }
        for (int j = 0; j < L; ++j) {
          a += sa[j];
          bsum += sb[j];
        }
        const A ma = a / static_cast<A>(D), mb = bsum / static_cast<A>(D);
        layer_norm_dx_row(xr, g, wp, o, dw, db, D, mu, rs, ma, mb);
      }
    }
  });
  const DType pdt = weight.defined() ? weight.dtype() : x.dtype();
  auto sums = reduce_partials(part, nb, 2, D, nshape, pdt);
  return {dx, weight.defined() ? sums[0] : Tensor(), sums[1]};
}

template <typename T>
std::pair<Tensor, Tensor> rms_norm_impl(const Tensor& x, const Shape& nshape, const Tensor& weight,
                                        double eps) {
  using A = acc_t<T>;
  const int64_t D = norm_numel(nshape), M = D == 0 ? 0 : x.numel() / D;
  const auto w = param_or<A>(weight, D, A(1));
  Tensor out = empty(x.shape(), x.dtype());
  Tensor rstd = empty(stat_shape(x, nshape), dtype_of_v<A>);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  A* rp = rstd.data_ptr<A>();
  const A* wp = w.data();
  parallel_for(0, M, row_grain(D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = xp + r * D;
      T* orow = op + r * D;
      A s1, s2;
      row_sum_sumsq<A>(xr, D, A(0), s1, s2);
      const A rs = static_cast<A>(1.0 / std::sqrt(static_cast<double>(s2) / D + eps));
      rp[r] = rs;
      for (int64_t i = 0; i < D; ++i) st(orow, i, ld<A>(xr, i) * rs * wp[i]);
    }
  });
  return {out, rstd};
}

template <typename T>
std::pair<Tensor, Tensor> rms_norm_backward_impl(const Tensor& grad_out, const Tensor& x,
                                                 const Shape& nshape, const Tensor& rstd,
                                                 const Tensor& weight) {
  using A = acc_t<T>;
  const int64_t D = norm_numel(nshape), M = D == 0 ? 0 : x.numel() / D;
  const auto w = param_or<A>(weight, D, A(1));
  const auto rss = param_values<A>(rstd);
  Tensor dx = empty(x.shape(), x.dtype());
  const T* xp = x.data_ptr<T>();
  const T* gp = grad_out.data_ptr<T>();
  T* dxp = dx.data_ptr<T>();
  const A* wp = w.data();
  const int64_t nb = num_blocks(M);
  std::vector<A> part(static_cast<size_t>(nb * D), A(0));
  parallel_for(0, nb, 1, [&](int64_t blo, int64_t bhi) {
    for (int64_t blk = blo; blk < bhi; ++blk) {
      int64_t lo, hi;
      block_range(M, nb, blk, lo, hi);
      A* dw = part.data() + blk * D;
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * D;
        const T* g = gp + r * D;
        T* o = dxp + r * D;
        const A rs = rss[r];
        constexpr int L = kLanes<A>;
        A sb[L] = {};  // sum g*w*xhat
        int64_t i = 0;
        for (; i + L <= D; i += L)
          for (int j = 0; j < L; ++j) {
            const A xh = ld<A>(xr, i + j) * rs;
            const A gi = ld<A>(g, i + j);
            sb[j] += gi * wp[i + j] * xh;
            dw[i + j] += gi * xh;
          }
        A bsum = 0;
        for (; i < D; ++i) {
          const A xh = ld<A>(xr, i) * rs;
          const A gi = ld<A>(g, i);
          bsum += gi * wp[i] * xh;
          dw[i] += gi * xh;
        }
        for (int j = 0; j < L; ++j) bsum += sb[j];
        const A mb = bsum / static_cast<A>(D);
        for (int64_t k = 0; k < D; ++k)
          st(o, k, rs * (ld<A>(g, k) * wp[k] - ld<A>(xr, k) * rs * mb));
      }
    }
  });
  Tensor dweight;
  if (weight.defined()) dweight = reduce_partials(part, nb, 1, D, nshape, weight.dtype())[0];
  return {dx, dweight};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Shape& normalized_shape,
                                              const Tensor& weight, const Tensor& bias,
                                              double eps) {
  return dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    return layer_norm_impl<decltype(tag)>(x, normalized_shape, weight, bias, eps);
  });
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Shape& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight) {
  return dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    return layer_norm_backward_impl<decltype(tag)>(grad_out, x, normalized_shape, mean, rstd,
                                                   weight);
  });
}

std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& weight, double eps) {
  return dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    return rms_norm_impl<decltype(tag)>(x, normalized_shape, weight, eps);
  });
}

std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Shape& normalized_shape, const Tensor& rstd,
                                            const Tensor& weight) {
  return dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    return rms_norm_backward_impl<decltype(tag)>(grad_out, x, normalized_shape, rstd, weight);
  });
}

}  // namespace qk::cpu

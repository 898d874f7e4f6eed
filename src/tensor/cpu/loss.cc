// Cross entropy on the CPU, logits [N, C, S] (S = product of trailing dims).
//
// With smoothing ls, the target distribution is (1-ls) one_hot(t) + ls/C, so
//   loss = -(1-ls) lp[t] - (ls/C) sum_c lp[c]       (lp = log_softmax)
//   dloss/dlogit[c] = softmax[c] - (1-ls) [c == t] - ls/C
// Positions whose target is ignore_index contribute 0 and are not counted;
// mean divides by the number of counted positions (PyTorch's rule; NaN when
// every target is ignored, as PyTorch).
#include "cpu/loss.h"

#include <cmath>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "cpu/norm_lanes.h"
#include "cpu/softmax.h"
#include "batch_channel_spatial.h"

namespace qk::cpu {
namespace {

template <typename I>
inline bool counted(I t, int64_t C, int64_t ignore_index, int64_t pos) {
  if (static_cast<int64_t>(t) == ignore_index) return false;
  QK_CHECK_INDEX(t >= 0 && static_cast<int64_t>(t) < C, "cross_entropy: target ",
                 static_cast<int64_t>(t), " at position ", pos, " is out of range for ", C,
                 " classes (and is not ignore_index ", ignore_index, ")");
  return true;
}

int64_t count_targets(const Tensor& target, int64_t C, int64_t ignore_index) {
  return dispatch_index(target.dtype(), "cross_entropy", [&](auto itag) {
    using I = decltype(itag);
    const I* tp = target.data_ptr<I>();
    int64_t n = 0;
    for (int64_t i = 0, rows = target.numel(); i < rows; ++i) n += counted(tp[i], C, ignore_index, i);
    return n;
  });
}

template <typename T, typename I>
Tensor ce_forward(const Tensor& lp, const Tensor& target, NCS d, int64_t ignore_index, double ls,
                  ops::Reduction red) {
  using A = acc_t<T>;
  const T* lpp = lp.data_ptr<T>();
  const I* tp = target.data_ptr<I>();
  std::vector<double> per(static_cast<size_t>(d.N * d.S));
  const double smooth = ls / static_cast<double>(d.C);
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, d.N * d.S, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, d.C)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p) {
                   const int64_t n = p / d.S, s = p % d.S;
                   const T* row = lpp + n * d.C * d.S + s;
                   if (!counted(tp[p], d.C, ignore_index, p)) {
                     per[p] = 0;
                     continue;
                   }
                   double l = -(1.0 - ls) *
                              static_cast<double>(ld<A>(row, static_cast<int64_t>(tp[p]) * d.S));
                   if (ls > 0) {
                     double all = 0;
                     if (d.S == 1) {
                       all = row_sum<A>(row, d.C);
                     } else {
                       for (int64_t c = 0; c < d.C; ++c) all += ld<A>(row, c * d.S);
                     }
                     l -= smooth * all;
                   }
                   per[p] = l;
                 }
               });
  if (red == ops::Reduction::none)
    return ops::cast(from_vector<double>(per, target.shape(), DType::f64), lp.dtype());
  double total = 0;
  int64_t count = 0;
  for (int64_t p = 0; p < d.N * d.S; ++p) {
    total += per[p];
    count += static_cast<int64_t>(tp[p]) != ignore_index;
  }
  if (red == ops::Reduction::mean) total /= static_cast<double>(count);  // 0/0 = NaN as PyTorch
  return ops::cast(scalar_tensor(total, DType::f64), lp.dtype());
}

template <typename T, typename I>
Tensor ce_backward(const Tensor& grad_loss, const Tensor& lp, const Tensor& target, NCS d,
                   int64_t ignore_index, double ls, ops::Reduction red) {
  using A = acc_t<T>;
  Tensor dx = empty(lp.shape(), lp.dtype());
  const T* lpp = lp.data_ptr<T>();
  const I* tp = target.data_ptr<I>();
  T* dxp = dx.data_ptr<T>();
  const T* gp = grad_loss.data_ptr<T>();
  double scale = 1.0;  // d total / d per-position loss
  if (red == ops::Reduction::mean)
    scale = 1.0 / static_cast<double>(count_targets(target, d.C, ignore_index));
  const A smooth = static_cast<A>(ls / static_cast<double>(d.C));
  const A hit = static_cast<A>(1.0 - ls);
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, d.N * d.S, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, d.C)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p) {
                   const int64_t n = p / d.S, s = p % d.S;
                   const T* row = lpp + n * d.C * d.S + s;
                   T* out = dxp + n * d.C * d.S + s;
                   const bool on = counted(tp[p], d.C, ignore_index, p);
                   const A g =
                       on ? static_cast<A>(scale * static_cast<double>(ld<A>(
                                                       gp, red == ops::Reduction::none ? p : 0)))
                          : A(0);
                   const int64_t t = on ? static_cast<int64_t>(tp[p]) : -1;
                   if (d.S == 1) {
                     for (int64_t c = 0; c < d.C; ++c)
                       st(out, c, g * (exp_vec(ld<A>(row, c)) - smooth));
                   } else {
                     for (int64_t c = 0; c < d.C; ++c)
                       st(out, c * d.S, g * (exp_vec(ld<A>(row, c * d.S)) - smooth));
                   }
                   if (on) st(out, t * d.S, ld<A>(out, t * d.S) - g * hit);
                 }
               });
  return dx;
}

}  // namespace

ops::CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target,
                                      int64_t ignore_index, double label_smoothing,
                                      ops::Reduction reduction) {
  Tensor lp = softmax_forward(logits, 1, /*log=*/true);
  const NCS d = ncs_of(logits);
  Tensor loss = dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    return dispatch_index(target.dtype(), "cross_entropy", [&](auto itag) {
      return ce_forward<decltype(tag), decltype(itag)>(lp, target, d, ignore_index, label_smoothing,
                                                       reduction);
    });
  });
  return {loss, lp};
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& log_probs,
                              const Tensor& target, int64_t ignore_index, double label_smoothing,
                              ops::Reduction reduction) {
  const NCS d = ncs_of(log_probs);
  return dispatch_floating(log_probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    return dispatch_index(target.dtype(), "cross_entropy_backward", [&](auto itag) {
      return ce_backward<decltype(tag), decltype(itag)>(grad_loss, log_probs, target, d,
                                                        ignore_index, label_smoothing, reduction);
    });
  });
}

}  // namespace qk::cpu

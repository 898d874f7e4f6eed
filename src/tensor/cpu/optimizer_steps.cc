// The CPU fused optimizer kernels: one pass per parameter, split across the
// intra-op thread pool. The loop bodies are branch-free per element (the
// branches are hoisted into template flags) so the compiler vectorises them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/ops/optimizer.h"

namespace qk::ops {

QK_DEFINE_KERNEL(sgd_step_kernel, SgdStepFn);
QK_DEFINE_KERNEL(adam_step_kernel, AdamStepFn);
QK_DEFINE_KERNEL(multi_tensor_unscale_norm_kernel, MultiTensorUnscaleNormFn);
QK_DEFINE_KERNEL(multi_tensor_scale_kernel, MultiTensorScaleFn);
// No CPU list kernels: the one-tensor kernels already use every core.
QK_DEFINE_KERNEL(multi_tensor_sgd_step_kernel, MultiTensorSgdStepFn);
QK_DEFINE_KERNEL(multi_tensor_adam_step_kernel, MultiTensorAdamStepFn);

namespace cpu {
namespace {

// Elements per task: enough work (~tens of microseconds) to amortise the
// hand-off to a pool thread (not measured against other grains).
constexpr int64_t kGrain = 1 << 15;

template <typename T, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_loop(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& a) {
  const T lr = static_cast<T>(a.lr), wd = static_cast<T>(a.weight_decay),
          mom = static_cast<T>(a.momentum), damp = static_cast<T>(1.0 - a.dampening);
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T d = g[i] + wd * p[i];
      if constexpr (kMomentum) {
        T b = kFirst ? d : mom * buf[i] + damp * d;
        buf[i] = b;
        d = kNesterov ? d + mom * b : b;
      }
      p[i] -= lr * d;
    }
  });
}

template <typename T>
void sgd_typed(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStepArgs& a) {
  T* p = param.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  const int64_t n = param.numel();
  if (a.momentum == 0) return sgd_loop<T, false, false, false>(p, g, nullptr, n, a);
  T* b = buf.data_ptr<T>();
  if (a.first_step) {
    if (a.nesterov) return sgd_loop<T, true, true, true>(p, g, b, n, a);
    return sgd_loop<T, true, false, true>(p, g, b, n, a);
  }
  if (a.nesterov) return sgd_loop<T, true, true, false>(p, g, b, n, a);
  sgd_loop<T, true, false, false>(p, g, b, n, a);
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStepArgs& a) {
  if (param.dtype() == DType::f64) return sgd_typed<double>(param, grad, buf, a);
  sgd_typed<float>(param, grad, buf, a);
}

// The per-step constants of one Adam update, computed once in double (as
// PyTorch computes them in Python floats) and rounded to T.
template <typename T>
struct AdamConsts {
  T step_size, inv_bc2_sqrt, b1, b2, omb1, omb2, eps, wd, decay;
};

// Elements [lo, hi) of one parameter. The pointers are plain arguments, not
// a lambda's by-reference captures: through those GCC cannot rule out that a
// store p[i] changes the pointer itself and left the loop scalar.
template <typename T, bool kDecoupled, bool kAmsgrad>
void adam_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                T* __restrict vmax, int64_t lo, int64_t hi, const AdamConsts<T> c) {
  for (int64_t i = lo; i < hi; ++i) {
    T x = p[i];
    T d = g[i];
    if constexpr (kDecoupled) x *= c.decay; else d += c.wd * x;
    T mi = c.b1 * m[i] + c.omb1 * d;
    T vi = c.b2 * v[i] + c.omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    T vu = vi;
    if constexpr (kAmsgrad) {
      vu = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vu;
    }
    p[i] = x - c.step_size * mi / (std::sqrt(vu) * c.inv_bc2_sqrt + c.eps);
  }
}

template <typename T, bool kDecoupled, bool kAmsgrad>
void adam_loop(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  const AdamConsts<T> c{static_cast<T>(a.lr / bc1),
                        static_cast<T>(1.0 / std::sqrt(bc2)),
                        static_cast<T>(a.beta1),
                        static_cast<T>(a.beta2),
                        static_cast<T>(1.0 - a.beta1),
                        static_cast<T>(1.0 - a.beta2),
                        static_cast<T>(a.eps),
                        static_cast<T>(a.weight_decay),
                        static_cast<T>(1.0 - a.lr * a.weight_decay)};
  parallel_for(0, n, kGrain, [=](int64_t lo, int64_t hi) {
    adam_range<T, kDecoupled, kAmsgrad>(p, g, m, v, vmax, lo, hi, c);
  });
}

template <typename T>
void adam_typed(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const Tensor& vmax, const AdamStepArgs& a) {
  T* p = param.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  T* mp = m.data_ptr<T>();
  T* vp = v.data_ptr<T>();
  T* vm = a.amsgrad ? vmax.data_ptr<T>() : nullptr;
  const int64_t n = param.numel();
  if (a.decoupled) {
    if (a.amsgrad) return adam_loop<T, true, true>(p, g, mp, vp, vm, n, a);
    return adam_loop<T, true, false>(p, g, mp, vp, vm, n, a);
  }
  if (a.amsgrad) return adam_loop<T, false, true>(p, g, mp, vp, vm, n, a);
  adam_loop<T, false, false>(p, g, mp, vp, vm, n, a);
}

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
               const Tensor& vmax, const AdamStepArgs& a) {
  if (param.dtype() == DType::f64) return adam_typed<double>(param, grad, m, v, vmax, a);
  adam_typed<float>(param, grad, m, v, vmax, a);
}

// ---- multi-tensor passes: chunks of kGrain elements, their sums added in
// chunk order, so the result does not depend on the thread count.

struct ChunkSums {
  double squares = 0;
  int64_t nonfinite = 0;
};

template <typename T>
ChunkSums unscale_norm_chunk(T* p, int64_t lo, int64_t hi, double scale) {
  using C = compute_t<T>;
  const C k = static_cast<C>(scale);
  ChunkSums r;
  for (int64_t i = lo; i < hi; ++i) {
    const C v = static_cast<C>(p[i]);
    r.nonfinite += !std::isfinite(v);
    const C w = scale != 1.0 ? v * k : v;
    if (scale != 1.0) p[i] = cast_value<T>(w);
    // The square of what is stored, as the gradient the optimizer then reads.
    const double stored = static_cast<double>(static_cast<C>(p[i]));
    r.squares += stored * stored;
  }
  return r;
}

void multi_tensor_unscale_norm(const std::vector<Tensor>& tensors, double scale, const Tensor& out) {
  double squares = 0, nonfinite = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel(), chunks = (n + kGrain - 1) / kGrain;
    std::vector<ChunkSums> part(static_cast<size_t>(chunks));
    dispatch_floating(t.dtype(), "multi_tensor_unscale_norm_", [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data_ptr<T>();
      parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c)
          part[static_cast<size_t>(c)] = unscale_norm_chunk(p, c * kGrain, std::min(n, (c + 1) * kGrain), scale);
      });
    });
    for (const ChunkSums& c : part) squares += c.squares, nonfinite += static_cast<double>(c.nonfinite);
  }
  double* o = out.data_ptr<double>();
  o[0] = squares;
  o[1] = nonfinite;
}

void multi_tensor_scale(const std::vector<Tensor>& tensors, double scale) {
  for (const Tensor& t : tensors) {
    dispatch_floating(t.dtype(), "multi_tensor_scale_", [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      T* p = t.data_ptr<T>();
      const C k = static_cast<C>(scale);
      parallel_for(0, t.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = cast_value<T>(static_cast<C>(p[i]) * k);
      });
    });
  }
}

}  // namespace
}  // namespace cpu

QK_REGISTER_KERNEL(sgd_step_kernel, cpu, cpu::sgd_step);
QK_REGISTER_KERNEL(adam_step_kernel, cpu, cpu::adam_step);
QK_REGISTER_KERNEL(multi_tensor_unscale_norm_kernel, cpu, cpu::multi_tensor_unscale_norm);
QK_REGISTER_KERNEL(multi_tensor_scale_kernel, cpu, cpu::multi_tensor_scale);

}  // namespace qk::ops

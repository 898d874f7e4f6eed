// my_ops: a fused bias + GELU op, y = gelu(x + bias) (exact, erf form), with
// CPU kernels, CUDA kernels (fused_bias_gelu_kernel.cu, when built with
// nvcc) and its backward, registered as a qianka extension.
//
//   qk::plugin::load_library("libmy_ops.so");
//   Tensor y = qk::plugin::call("my_ops::fused_bias_gelu", {x, bias});  // x [..., C], bias [C]
//
// The backward is an op of its own, fused_bias_gelu_backward, with a kernel
// per device too, so the gradient runs where the tensors are.
#include <algorithm>
#include <cmath>

#include "qk/base/thread_pool.h"
#include "qk/plugin/extension.h"
#include "qk/plugin/registry.h"

#if defined(QK_EXTENSION_WITH_CUDA)
#include "fused_bias_gelu.h"
#endif

namespace {

using qk::Tensor;

// x [..., C] and bias [C] of one floating dtype; returns (rows, C).
std::pair<int64_t, int64_t> check_inputs(const char* op, const Tensor& x, const Tensor& bias) {
  QK_CHECK(x.dim() >= 1 && bias.dim() == 1 && x.size(-1) == bias.size(0), op,
           ": x must be [..., C] and bias [C], got ", qk::shape_str(x.shape()), " and ",
           qk::shape_str(bias.shape()));
  QK_CHECK_TYPE(x.dtype() == bias.dtype() && (x.dtype() == qk::DType::f32 || x.dtype() == qk::DType::f64),
                op, ": x and bias must both be f32 or both f64, got ", x.dtype(), " and ",
                bias.dtype());
  const int64_t cols = bias.size(0);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

// erf for f32 as x * P(x^2) / Q(x^2) on [-4, 4] (beyond, erf is +-1 in f32):
// no branch and no libm call, so the forward loop vectorises (std::erf does
// not). Within 4e-7 of erf; coefficients from a weighted least-squares
// rational fit (Sanathanan-Koerner inside Lawson iterations).
inline float erf_f32(float a) {
  const float x = std::min(std::max(a, -4.f), 4.f), t = x * x;
  const float p =
      1.128378510e+00f +
      t * (2.200446427e-01f +
           t * (5.326109007e-02f +
                t * (4.559590481e-03f +
                     t * (1.624123979e-04f + t * (-2.024572495e-06f + t * 1.920788328e-08f)))));
  const float q = 1.0f + t * (5.283352733e-01f +
                              t * (1.233405545e-01f + t * (1.608477533e-02f + t * 1.164261717e-03f)));
  return x * p / q;
}
inline float erf_of(float x) { return erf_f32(x); }
inline double erf_of(double x) { return std::erf(x); }  // f64 stays exact (gradcheck)

template <typename T>
T gelu(T u) {
  return T(0.5) * u * (T(1) + erf_of(u * T(0.7071067811865476)));
}
template <typename T>
T gelu_grad(T u) {  // Phi(u) + u * phi(u)
  const T cdf = T(0.5) * (T(1) + std::erf(u * T(0.7071067811865476)));
  return cdf + u * T(0.3989422804014327) * std::exp(T(-0.5) * u * u);
}

// ---- CPU ----

template <typename T>
void forward_cpu_typed(const T* x, const T* b, T* y, int64_t rows, int64_t cols) {
  qk::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t r = lo; r < hi; ++r)
                       for (int64_t c = 0; c < cols; ++c)
                         y[r * cols + c] = gelu(x[r * cols + c] + b[c]);
                   });
}

Tensor fused_bias_gelu_cpu(const Tensor& x_in, const Tensor& bias_in) {
  auto [rows, cols] = check_inputs("my_ops::fused_bias_gelu", x_in, bias_in);
  const Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  Tensor y = qk::empty_like(x);
  if (x.dtype() == qk::DType::f64)
    forward_cpu_typed(x.data_ptr<double>(), bias.data_ptr<double>(), y.data_ptr<double>(), rows, cols);
  else
    forward_cpu_typed(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
  return y;
}

template <typename T>
void backward_cpu_typed(const T* g, const T* x, const T* b, T* dx, T* db, int64_t rows,
                        int64_t cols) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  qk::parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dx[r * cols + c] = g[r * cols + c] * gelu_grad(x[r * cols + c] + b[c]);
  });
  // The bias gradient sums dx over rows: threads split the columns, each
  // walks every row of its columns (accumulated in double).
  qk::parallel_for(0, cols, 64, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(hi - lo), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = lo; c < hi; ++c) acc[c - lo] += dx[r * cols + c];
    for (int64_t c = lo; c < hi; ++c) db[c] = static_cast<T>(acc[c - lo]);
  });
}

std::tuple<Tensor, Tensor> fused_bias_gelu_backward_cpu(const Tensor& grad_in, const Tensor& x_in,
                                                        const Tensor& bias_in) {
  auto [rows, cols] = check_inputs("my_ops::fused_bias_gelu_backward", x_in, bias_in);
  const Tensor g = grad_in.to(x_in.dtype()).contiguous(), x = x_in.contiguous(),
               bias = bias_in.contiguous();
  Tensor dx = qk::empty_like(x), db = qk::empty_like(bias);
  if (x.dtype() == qk::DType::f64)
    backward_cpu_typed(g.data_ptr<double>(), x.data_ptr<double>(), bias.data_ptr<double>(),
                       dx.data_ptr<double>(), db.data_ptr<double>(), rows, cols);
  else
    backward_cpu_typed(g.data_ptr<float>(), x.data_ptr<float>(), bias.data_ptr<float>(),
                       dx.data_ptr<float>(), db.data_ptr<float>(), rows, cols);
  return {dx, db};
}

// ---- CUDA: the same contract on device memory ----

#if defined(QK_EXTENSION_WITH_CUDA)
void check_cuda(const char* op, int err) {
  QK_CHECK_AS(qk::DeviceError, err == 0, op, ": CUDA kernel launch failed: ",
              my_ops::cuda_error_name(err));
}

Tensor fused_bias_gelu_cuda(const Tensor& x_in, const Tensor& bias_in) {
  auto [rows, cols] = check_inputs("my_ops::fused_bias_gelu", x_in, bias_in);
  const Tensor x = x_in.contiguous(), bias = bias_in.contiguous();
  Tensor y = qk::empty_like(x);
  check_cuda("my_ops::fused_bias_gelu",
             my_ops::fused_bias_gelu_forward_cuda(x.raw_data(), bias.raw_data(), y.raw_data(),
                                                  rows, cols, x.dtype() == qk::DType::f64));
  return y;
}

std::tuple<Tensor, Tensor> fused_bias_gelu_backward_cuda(const Tensor& grad_in, const Tensor& x_in,
                                                         const Tensor& bias_in) {
  auto [rows, cols] = check_inputs("my_ops::fused_bias_gelu_backward", x_in, bias_in);
  const Tensor g = grad_in.to(x_in.dtype()).contiguous(), x = x_in.contiguous(),
               bias = bias_in.contiguous();
  Tensor dx = qk::empty_like(x), db = qk::empty_like(bias);
  check_cuda("my_ops::fused_bias_gelu_backward",
             my_ops::fused_bias_gelu_backward_cuda(g.raw_data(), x.raw_data(), bias.raw_data(),
                                                   dx.raw_data(), db.raw_data(), rows, cols,
                                                   x.dtype() == qk::DType::f64));
  return {dx, db};
}
#endif

// ---- autograd: one gradient per argument (x, bias) ----

std::vector<Tensor> fused_bias_gelu_backward(const qk::plugin::BackwardContext& ctx) {
  return qk::plugin::call_multi("my_ops::fused_bias_gelu_backward",
                                {ctx.grad(0), ctx.tensor("x"), ctx.tensor("bias")});
}

}  // namespace

QK_EXTENSION(my_ops, lib) {
  lib.def("fused_bias_gelu(Tensor x, Tensor bias) -> Tensor")
      .kernel(qk::DeviceType::cpu, fused_bias_gelu_cpu)
#if defined(QK_EXTENSION_WITH_CUDA)
      .kernel(qk::DeviceType::cuda, fused_bias_gelu_cuda)
#endif
      .backward(fused_bias_gelu_backward);
  lib.def("fused_bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> (Tensor, Tensor)")
      .kernel(qk::DeviceType::cpu, fused_bias_gelu_backward_cpu)
#if defined(QK_EXTENSION_WITH_CUDA)
      .kernel(qk::DeviceType::cuda, fused_bias_gelu_backward_cuda)
#endif
      ;
}

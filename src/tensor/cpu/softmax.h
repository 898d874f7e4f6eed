// CPU softmax / log_softmax kernels (contiguous input, dim already wrapped),
// and the vectorizable exp they share with the loss kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// out = softmax(x, dim), or log_softmax when `log`.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
// dx from dy and the forward's output y.
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim, bool log);

// exp(x) for float in plain arithmetic, so GCC vectorizes loops calling it
// (std::exp is a scalar libm call without -ffast-math). Cephes' expf
// polynomial: max relative error ~2 ulp; exp(x < -87.3) = 0, exp(x > 88) = inf,
// exp(NaN) = NaN.
inline float exp_vec(float x) {
  const float lo = -87.33654f, hi = 88.0f;  // keeps 2^n a normal float
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // n = round(x / ln 2) with the 1.5 * 2^23 trick (exact for |n| < 2^22).
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float y = p * std::bit_cast<float>(e);
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return x != x ? x : y;
}
inline double exp_vec(double x) { return std::exp(x); }

}  // namespace qk::cpu

// Float math in plain arithmetic, so GCC vectorizes the loops that call it
// (std::exp and std::erf are scalar libm calls without -ffast-math, 10-20x
// slower per element than a vector lane). Always inlined: a call in the loop
// body (GCC leaves these out-of-line in large translation units) keeps it
// scalar. The double overloads are libm's. A loop calling them vectorises
// only where the file is built with -fno-trapping-math (see
// src/tensor/CMakeLists.txt): GCC's default keeps their float selects as
// branches.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace qk {

// exp(x) for float in plain arithmetic, so GCC vectorizes loops calling it
// (std::exp is a scalar libm call without -ffast-math). Cephes' expf
// polynomial: max relative error ~2 ulp; exp(x < -87.3) = 0, exp(x > 88) = inf,
// exp(NaN) = NaN.
[[gnu::always_inline]] inline float exp_vec(float x) {
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

// erf(x) for float: Eigen's generic_fast_erf, a rational approximation
// (odd degree-9 over even degree-12 polynomial), max abs error 3.2e-7 against
// erf in double (the error of 1 + erf(x) for x < -3, where GELU cancels, is
// of that size). Beyond |x| = 3.8325 erf is +-1 in float, so |x| is clamped
// there first: on the bits, since positive floats order as integers and an
// integer select vectorizes where a float compare (it may trap) does not.
// erf(NaN) = NaN, erf(+-inf) = +-1.
[[gnu::always_inline]] inline float erf_vec(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t mag = bits & 0x7fffffffu, lim = 0x407547cbu;  // 3.832506856900711f
  const uint32_t clamped = (mag > lim && mag <= 0x7f800000u) ? lim : mag;
  const float x = std::bit_cast<float>((bits & 0x80000000u) | clamped);
  const float x2 = x * x;
  float p = 0.00022905065861350646f;
  p = p * x2 + 0.0034082910107109506f;
  p = p * x2 + 0.050955695062380861f;
  p = p * x2 + 0.18520832239976145f;
  p = p * x2 + 1.128379143519084f;
  p = p * x;
  float q = -1.1791602954361697e-7f;
  q = q * x2 + 0.000023547966471313185f;
  q = q * x2 + 0.0010179625278914885f;
  q = q * x2 + 0.014070470171167667f;
  q = q * x2 + 0.11098505178285362f;
  q = q * x2 + 0.49746925110067538f;
  q = q * x2 + 1.0f;
  return p / q;
}
inline double erf_vec(double x) { return std::erf(x); }

}  // namespace qk

// Elementwise kernels: strided copies with dtype conversion, binary and
// unary ops with broadcasting. Arithmetic happens where the CPU backend's
// does (src/tensor/cpu/elementwise.cc): f16 and bf16 in float, rounded to
// nearest even on the way out; each op has the CPU's formula, so results
// differ from the CPU's by the device math library's ulps alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_check.h"
#include "dtypes.cuh"
#include "kernels.h"

namespace qk::cuda {

namespace {

// ---- the loop -----------------------------------------------------------

// Element i's offset (in elements) in operand k.
template <int K>
__device__ __forceinline__ void offsets(const ElementwiseLayout& l, int64_t i, int64_t (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t c = i % l.sizes[d];
    i /= l.sizes[d];
    for (int k = 0; k < K; ++k) off[k] += c * l.strides[k][d];
  }
}

constexpr int kThreads = kBlock;  // grid_for counts blocks of kBlock


template <typename O, typename A, typename F>
__global__ void map1(ElementwiseLayout l, O* out, const A* a, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(l, i, off);
    out[off[0]] = f(a[off[1]]);
  }
}

template <typename O, typename A, typename B, typename F>
__global__ void map2(ElementwiseLayout l, O* out, const A* a, const B* b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets<3>(l, i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <typename O, typename A, typename B, typename C, typename F>
__global__ void map3(ElementwiseLayout l, O* out, const A* a, const B* b, const C* c, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[4];
    offsets<4>(l, i, off);
    out[off[0]] = f(a[off[1]], b[off[2]], c[off[3]]);
  }
}

// In place: self[i] = f(self[i], other[i]).
template <typename T, typename A, typename F>
__global__ void update1(ElementwiseLayout l, T* self, const A* other, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(l, i, off);
    self[off[0]] = f(self[off[0]], other[off[1]]);
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename T>
void fill_as(void* dst, int64_t n, uint64_t bits, cudaStream_t stream) {
  T value;
  static_assert(sizeof(T) <= sizeof(bits));
  memcpy(&value, &bits, sizeof(T));
  fill_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
  QK_CUDA_CHECK(cudaGetLastError());
}

// ---- the ops (the CPU's formulas) ---------------------------------------

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhC = 0.044715;

// Binary op codes (qk::BinaryOp).
enum : int { kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum, kEq, kNe, kLt, kLe, kGt, kGe };
// Unary op codes (qk::UnaryOp).
enum : int {
  kNeg, kExp, kLog, kSqrt, kRsqrt, kRelu, kGelu, kGeluTanh, kSilu, kTanh, kSigmoid, kAbs, kSign, kSquare,
  kReciprocal, kSin, kCos, kErf
};

// Integer powers exactly, by squaring: the device's pow(double) may land a
// hair under an integer (3^1 as 2.9999...) and the cast would truncate it.
// Negative exponents give what the CPU's truncated pow gives: 1 / x^-y
// rounded toward zero (1 and -1 keep their magnitude, everything else 0).
template <typename C>
__device__ __forceinline__ C int_pow(C x, C y) {
  if constexpr (std::is_same_v<C, bool>) {
    return x || !y;
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (y < 0) return x == 1 ? C(1) : (x == C(-1) ? ((y & 1) ? C(-1) : C(1)) : C(0));
    }
    C r = 1;
    while (y) {
      if (y & 1) r *= x;
      y >>= 1;
      if (y) x *= x;
    }
    return r;
  }
}

template <int Op, typename C>
__device__ __forceinline__ C arith(C x, C y) {
  if constexpr (Op == kAdd) return x + y;
  if constexpr (Op == kSub) return x - y;
  if constexpr (Op == kMul) return x * y;
  if constexpr (Op == kDiv) return x / y;
  if constexpr (Op == kPow) {
    if constexpr (std::is_same_v<C, float>) return powf(x, y);
    else if constexpr (std::is_integral_v<C>) return int_pow(x, y);
    else return static_cast<C>(pow(static_cast<double>(x), static_cast<double>(y)));
  }
  if constexpr (Op == kMaximum) return (x != x || x > y) ? x : y;
  if constexpr (Op == kMinimum) return (x != x || x < y) ? x : y;
  return x;
}

template <int Op, typename C>
__device__ __forceinline__ bool compare(C x, C y) {
  if constexpr (Op == kEq) return x == y;
  if constexpr (Op == kNe) return x != y;
  if constexpr (Op == kLt) return x < y;
  if constexpr (Op == kLe) return x <= y;
  if constexpr (Op == kGt) return x > y;
  return x >= y;  // kGe
}

// exp, log, ... for float and double (the integer ops never reach these).
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }

template <int Op, typename C>
__device__ __forceinline__ C unary_value(C x) {
  if constexpr (Op == kNeg) return -x;
  if constexpr (Op == kRelu) return x > C(0) ? x : C(0);
  if constexpr (Op == kAbs) {
    if constexpr (std::is_floating_point_v<C>) return m_abs(x);  // -0 -> +0, as std::abs
    else if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? -x : x;
  }
  if constexpr (Op == kSign) {
    if constexpr (std::is_unsigned_v<C>) return static_cast<C>(x > C(0));
    else return static_cast<C>((x > C(0)) - (x < C(0)));
  }
  if constexpr (Op == kSquare) return x * x;
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (Op == kExp) return m_exp(x);
    if constexpr (Op == kLog) return m_log(x);
    if constexpr (Op == kSqrt) return m_sqrt(x);
    if constexpr (Op == kRsqrt) return C(1) / m_sqrt(x);
    if constexpr (Op == kGelu) return C(0.5) * x * (C(1) + m_erf(x * C(kSqrt1_2)));
    if constexpr (Op == kGeluTanh) return C(0.5) * x * (C(1) + m_tanh(C(kSqrt2OverPi) * (x + C(kGeluTanhC) * x * x * x)));
    if constexpr (Op == kSilu) return x / (C(1) + m_exp(-x));
    if constexpr (Op == kTanh) return m_tanh(x);
    if constexpr (Op == kSigmoid) return C(1) / (C(1) + m_exp(-x));
    if constexpr (Op == kReciprocal) return C(1) / x;
    if constexpr (Op == kSin) return m_sin(x);
    if constexpr (Op == kCos) return m_cos(x);
    if constexpr (Op == kErf) return m_erf(x);
  }
  return x;
}

// Functors, not device lambdas: no --extended-lambda, and they may be made
// inside the dispatching lambdas.
template <int Op, typename T>
struct ArithFn {
  __device__ T operator()(T x, T y) const {
    using C = typename ComputeOf<T>::type;
    return convert<T>(arith<Op>(convert<C>(x), convert<C>(y)));
  }
};
template <int Op, typename T>
struct CompareFn {
  __device__ bool operator()(T x, T y) const {
    using C = typename ComputeOf<T>::type;
    return compare<Op>(convert<C>(x), convert<C>(y));
  }
};
// The scalar forms: the right operand in the kernel's arguments (the
// binary functors' arithmetic, so a op b gives the same bits either way).
template <int Op, typename T>
struct ArithScalarFn {
  T b;
  __device__ T operator()(T x) const { return ArithFn<Op, T>{}(x, b); }
};
template <int Op, typename T>
struct CompareScalarFn {
  T b;
  __device__ bool operator()(T x) const { return CompareFn<Op, T>{}(x, b); }
};
template <int Op, typename T>
struct UnaryFn {
  __device__ T operator()(T x) const {
    using C = typename ComputeOf<T>::type;
    return convert<T>(unary_value<Op>(convert<C>(x)));
  }
};
template <typename O, typename A>
struct ConvertFn {
  __device__ O operator()(A x) const { return convert<O>(x); }
};

constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// d(op)/dx at x, y = op(x): the CPU's unary_derivative.
template <int Op, typename C>
__device__ __forceinline__ C unary_derivative(C x, C y) {
  if constexpr (Op == kNeg) return C(-1);
  if constexpr (Op == kExp) return y;
  if constexpr (Op == kLog) return C(1) / x;
  if constexpr (Op == kSqrt) return C(0.5) / y;
  if constexpr (Op == kRsqrt) return C(-0.5) * y * y * y;
  if constexpr (Op == kRelu) return x > C(0) ? C(1) : C(0);
  if constexpr (Op == kGelu)
    return C(0.5) * (C(1) + m_erf(x * C(kSqrt1_2))) + x * C(kInvSqrt2Pi) * m_exp(C(-0.5) * x * x);
  if constexpr (Op == kGeluTanh) {
    C u = C(kSqrt2OverPi) * (x + C(kGeluTanhC) * x * x * x);
    C t = m_tanh(u);
    C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluTanhC) * x * x);
    return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
  }
  if constexpr (Op == kSilu) {
    C s = C(1) / (C(1) + m_exp(-x));
    return s * (C(1) + x * (C(1) - s));
  }
  if constexpr (Op == kTanh) return C(1) - y * y;
  if constexpr (Op == kSigmoid) return y * (C(1) - y);
  if constexpr (Op == kAbs) return static_cast<C>((x > C(0)) - (x < C(0)));
  if constexpr (Op == kSign) return C(0);
  if constexpr (Op == kSquare) return C(2) * x;
  if constexpr (Op == kReciprocal) return -y * y;
  if constexpr (Op == kSin) return m_cos(x);
  if constexpr (Op == kCos) return -m_sin(x);
  if constexpr (Op == kErf) return C(2) * C(0.56418958354775628695) * m_exp(-x * x);
  return C(0);
}

template <int Op, typename T>
struct UnaryBackwardFn {
  __device__ T operator()(T g, T x, T y) const {
    using C = typename ComputeOf<T>::type;
    return convert<T>(convert<C>(g) * unary_derivative<Op>(convert<C>(x), convert<C>(y)));
  }
};

template <typename T>
struct AddScaledFn {
  typename ComputeOf<T>::type alpha;
  __device__ T operator()(T s, T o) const {
    using C = typename ComputeOf<T>::type;
    return convert<T>(convert<C>(s) + alpha * convert<C>(o));
  }
};

template <int Op, typename T>
void binary_as(void* out, const void* a, const void* b, const ElementwiseLayout& l, cudaStream_t s) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  if constexpr (Op >= kEq)
    map2<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<bool*>(out), pa, pb, CompareFn<Op, T>{});
  else
    map2<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<T*>(out), pa, pb, ArithFn<Op, T>{});
  QK_CUDA_CHECK(cudaGetLastError());
}

template <int Op, typename T>
void binary_scalar_as(void* out, const void* a, T b, const ElementwiseLayout& l, cudaStream_t s) {
  const T* pa = static_cast<const T*>(a);
  if constexpr (Op >= kEq)
    map1<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<bool*>(out), pa, CompareScalarFn<Op, T>{b});
  else
    map1<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<T*>(out), pa, ArithScalarFn<Op, T>{b});
  QK_CUDA_CHECK(cudaGetLastError());
}

template <int Op, typename T>
void unary_as(void* out, const void* a, const ElementwiseLayout& l, cudaStream_t s) {
  map1<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<T*>(out), static_cast<const T*>(a), UnaryFn<Op, T>{});
  QK_CUDA_CHECK(cudaGetLastError());
}

// Op codes as template arguments, one switch per launch.
template <typename T>
void binary_dispatch(int op, void* out, const void* a, const void* b, const ElementwiseLayout& l, cudaStream_t s) {
  switch (op) {
#define QK_BINARY_CASE(code) \
  case code: return binary_as<code, T>(out, a, b, l, s);
    QK_BINARY_CASE(kAdd) QK_BINARY_CASE(kSub) QK_BINARY_CASE(kMul) QK_BINARY_CASE(kDiv) QK_BINARY_CASE(kPow)
    QK_BINARY_CASE(kMaximum) QK_BINARY_CASE(kMinimum) QK_BINARY_CASE(kEq) QK_BINARY_CASE(kNe)
    QK_BINARY_CASE(kLt) QK_BINARY_CASE(kLe) QK_BINARY_CASE(kGt) QK_BINARY_CASE(kGe)
#undef QK_BINARY_CASE
  }
}

template <typename T>
void binary_scalar_dispatch(int op, void* out, const void* a, T b, const ElementwiseLayout& l, cudaStream_t s) {
  switch (op) {
#define QK_BINARY_SCALAR_CASE(code) \
  case code: return binary_scalar_as<code, T>(out, a, b, l, s);
    QK_BINARY_SCALAR_CASE(kAdd) QK_BINARY_SCALAR_CASE(kSub) QK_BINARY_SCALAR_CASE(kMul) QK_BINARY_SCALAR_CASE(kDiv)
    QK_BINARY_SCALAR_CASE(kPow) QK_BINARY_SCALAR_CASE(kMaximum) QK_BINARY_SCALAR_CASE(kMinimum)
    QK_BINARY_SCALAR_CASE(kEq) QK_BINARY_SCALAR_CASE(kNe) QK_BINARY_SCALAR_CASE(kLt) QK_BINARY_SCALAR_CASE(kLe)
    QK_BINARY_SCALAR_CASE(kGt) QK_BINARY_SCALAR_CASE(kGe)
#undef QK_BINARY_SCALAR_CASE
  }
}

template <typename T>
void unary_backward_dispatch(int op, void* dx, const void* g, const void* x, const void* y, const ElementwiseLayout& l,
                             cudaStream_t s) {
  switch (op) {
#define QK_UNARY_BWD_CASE(code)                                                                          \
  case code:                                                                                             \
    map3<<<grid_for(l.numel), kThreads, 0, s>>>(l, static_cast<T*>(dx), static_cast<const T*>(g),        \
                                                static_cast<const T*>(x), static_cast<const T*>(y),       \
                                                UnaryBackwardFn<code, T>{});                              \
    break;
    QK_UNARY_BWD_CASE(kNeg) QK_UNARY_BWD_CASE(kExp) QK_UNARY_BWD_CASE(kLog) QK_UNARY_BWD_CASE(kSqrt)
    QK_UNARY_BWD_CASE(kRsqrt) QK_UNARY_BWD_CASE(kRelu) QK_UNARY_BWD_CASE(kGelu) QK_UNARY_BWD_CASE(kGeluTanh)
    QK_UNARY_BWD_CASE(kSilu) QK_UNARY_BWD_CASE(kTanh) QK_UNARY_BWD_CASE(kSigmoid) QK_UNARY_BWD_CASE(kAbs)
    QK_UNARY_BWD_CASE(kSign) QK_UNARY_BWD_CASE(kSquare) QK_UNARY_BWD_CASE(kReciprocal) QK_UNARY_BWD_CASE(kSin)
    QK_UNARY_BWD_CASE(kCos) QK_UNARY_BWD_CASE(kErf)
#undef QK_UNARY_BWD_CASE
  }
  QK_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void unary_dispatch(int op, void* out, const void* a, const ElementwiseLayout& l, cudaStream_t s) {
  switch (op) {
#define QK_UNARY_CASE(code) \
  case code: return unary_as<code, T>(out, a, l, s);
    QK_UNARY_CASE(kNeg) QK_UNARY_CASE(kExp) QK_UNARY_CASE(kLog) QK_UNARY_CASE(kSqrt) QK_UNARY_CASE(kRsqrt)
    QK_UNARY_CASE(kRelu) QK_UNARY_CASE(kGelu) QK_UNARY_CASE(kGeluTanh) QK_UNARY_CASE(kSilu)
    QK_UNARY_CASE(kTanh) QK_UNARY_CASE(kSigmoid) QK_UNARY_CASE(kAbs) QK_UNARY_CASE(kSign)
    QK_UNARY_CASE(kSquare) QK_UNARY_CASE(kReciprocal) QK_UNARY_CASE(kSin) QK_UNARY_CASE(kCos)
    QK_UNARY_CASE(kErf)
#undef QK_UNARY_CASE
  }
}

}  // namespace

void launch_unary_backward(int op, void* dx, const void* grad, const void* x, const void* y, int dtype,
                           const ElementwiseLayout& l, cudaStream_t stream) {
  if (l.numel <= 0) return;
  switch (dtype) {
    case kF32: return unary_backward_dispatch<float>(op, dx, grad, x, y, l, stream);
    case kF64: return unary_backward_dispatch<double>(op, dx, grad, x, y, l, stream);
    case kF16: return unary_backward_dispatch<__half>(op, dx, grad, x, y, l, stream);
    case kBF16: return unary_backward_dispatch<__nv_bfloat16>(op, dx, grad, x, y, l, stream);
  }
}

void launch_add_inplace(void* self, const void* other, int dtype, double alpha, const ElementwiseLayout& l,
                        cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = typename ComputeOf<T>::type;
      update1<<<grid_for(l.numel), kThreads, 0, stream>>>(l, static_cast<T*>(self), static_cast<const T*>(other),
                                                          AddScaledFn<T>{static_cast<C>(alpha)});
      QK_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void launch_fill(void* dst, int64_t n, size_t size, uint64_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  switch (size) {
    case 1: return fill_as<uint8_t>(dst, n, bits, stream);
    case 2: return fill_as<uint16_t>(dst, n, bits, stream);
    case 4: return fill_as<uint32_t>(dst, n, bits, stream);
    case 8: return fill_as<uint64_t>(dst, n, bits, stream);
  }
}

void launch_copy(void* dst, int dst_dtype, const void* src, int src_dtype, const ElementwiseLayout& l,
                 cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch(dst_dtype, [&](auto o) {
    using O = decltype(o);
    dispatch(src_dtype, [&](auto a) {
      using A = decltype(a);
      map1<<<grid_for(l.numel), kThreads, 0, stream>>>(l, static_cast<O*>(dst), static_cast<const A*>(src),
                                                       ConvertFn<O, A>{});
      QK_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void launch_binary_scalar(int op, void* out, const void* a, uint64_t b_bits, int dtype, const ElementwiseLayout& l,
                          cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = std::conditional_t<std::is_same_v<decltype(t), bool>, uint8_t, decltype(t)>;  // bools as bytes
    T b;
    static_assert(sizeof(T) <= sizeof(b_bits));
    memcpy(static_cast<void*>(&b), &b_bits, sizeof(T));  // via void*: __half has no trivial copy-assignment from bytes
    binary_scalar_dispatch<T>(op, out, a, b, l, stream);
  });
}

void launch_binary(int op, void* out, const void* a, const void* b, int dtype, const ElementwiseLayout& l,
                   cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      if (op >= kEq) binary_dispatch<uint8_t>(op, out, a, b, l, stream);  // bools compare as bytes
    } else {
      binary_dispatch<T>(op, out, a, b, l, stream);
    }
  });
}

void launch_unary(int op, void* out, const void* a, int dtype, const ElementwiseLayout& l, cudaStream_t stream) {
  if (l.numel <= 0) return;
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool>) unary_dispatch<T>(op, out, a, l, stream);
  });
}

}  // namespace qk::cuda

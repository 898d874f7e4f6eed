#include "core/reduce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstring>

#include "qk/base/error.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace qccl {

namespace {
struct DtypeInfo {
  const char* name;
  size_t size;
};
// Indexed by qcclDataType_t.
constexpr DtypeInfo kDtypes[qcclNumTypes] = {
    {"int8", 1},   {"uint8", 1},   {"int32", 4},   {"uint32", 4},
    {"int64", 8},  {"uint64", 8},  {"float16", 2}, {"float32", 4},
    {"float64", 8}, {"bfloat16", 2}, {"int16", 2},  {"uint16", 2}};
constexpr const char* kOps[qcclNumOps] = {"sum", "prod", "max", "min", "avg"};
}  // namespace

bool dtype_valid(int t) { return t >= 0 && t < qcclNumTypes; }
bool op_valid(int op) { return op >= 0 && op < qcclNumOps; }

size_t dtype_size(qcclDataType_t t) {
  QK_CHECK(dtype_valid(t), "Expected a qcclDataType_t in [0, ", int(qcclNumTypes), "), got ", int(t));
  return kDtypes[t].size;
}
const char* dtype_name(qcclDataType_t t) { return dtype_valid(t) ? kDtypes[t].name : "invalid"; }
const char* op_name(qcclRedOp_t op) { return op_valid(op) ? kOps[op] : "invalid"; }

float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) { man <<= 1; --exp; }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

uint16_t float_to_half(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (ax < 0x38800000u) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &ax, 4);
    // Adding 0.5 (2^-1) aligns the mantissa so the FPU rounds to nearest even.
    float r = a + 0.5f;
    uint32_t rb;
    std::memcpy(&rb, &r, 4);
    return static_cast<uint16_t>(sign | (rb - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (ax >> 13));
#endif
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

namespace {

// NaN wins in max/min so a NaN anywhere is seen everywhere. The algorithms
// always pass operands in rank order, so ties (+0/-0) resolve the same way on
// every rank.
template <typename T>
inline T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <typename T>
inline T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}

template <typename T, typename F>
void loop(void* dst, const void* a, const void* b, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
}

template <typename T>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, qcclRedOp_t op) {
  // Unsigned arithmetic for the integer sum/product: wraps instead of being UB.
  using W = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                        std::type_identity<T>>::type;
  switch (op) {
    case qcclSum:
    case qcclAvg:
      return loop<T>(dst, a, b, n, [](T u, T v) { return static_cast<T>(W(u) + W(v)); });
    case qcclProd:
      return loop<T>(dst, a, b, n, [](T u, T v) { return static_cast<T>(W(u) * W(v)); });
    case qcclMax: return loop<T>(dst, a, b, n, max_of<T>);
    case qcclMin: return loop<T>(dst, a, b, n, min_of<T>);
    default: break;
  }
  QK_THROW(qk::ValueError, "Expected a qcclRedOp_t, got ", int(op));
}

// 16-bit floats: widen to f32, reduce, round back once.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void reduce_f16like(void* dst, const void* a, const void* b, size_t n, qcclRedOp_t op) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  constexpr size_t kBlock = 256;  // 2 KiB of floats on the stack; not measured
  float fx[kBlock], fy[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) fx[i] = ToF(x[base + i]);
    for (size_t i = 0; i < m; ++i) fy[i] = ToF(y[base + i]);
    reduce_typed<float>(fx, fx, fy, m, op);
    for (size_t i = 0; i < m; ++i) d[base + i] = FromF(fx[i]);
  }
}

template <typename T>
void avg_typed(void* data, size_t n, int nranks) {
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(nranks));
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t n, qcclDataType_t t, qcclRedOp_t op) {
  switch (t) {
    case qcclInt8: return reduce_typed<int8_t>(dst, a, b, n, op);
    case qcclUint8: return reduce_typed<uint8_t>(dst, a, b, n, op);
    case qcclInt16: return reduce_typed<int16_t>(dst, a, b, n, op);
    case qcclUint16: return reduce_typed<uint16_t>(dst, a, b, n, op);
    case qcclInt32: return reduce_typed<int32_t>(dst, a, b, n, op);
    case qcclUint32: return reduce_typed<uint32_t>(dst, a, b, n, op);
    case qcclInt64: return reduce_typed<int64_t>(dst, a, b, n, op);
    case qcclUint64: return reduce_typed<uint64_t>(dst, a, b, n, op);
    case qcclFloat32: return reduce_typed<float>(dst, a, b, n, op);
    case qcclFloat64: return reduce_typed<double>(dst, a, b, n, op);
    case qcclFloat16: return reduce_f16like<half_to_float, float_to_half>(dst, a, b, n, op);
    case qcclBfloat16: return reduce_f16like<bf16_to_float, float_to_bf16>(dst, a, b, n, op);
    default: break;
  }
  QK_THROW(qk::ValueError, "Expected a qcclDataType_t, got ", int(t));
}

void finish_avg(void* data, size_t n, qcclDataType_t t, int nranks) {
  switch (t) {
    case qcclInt8: return avg_typed<int8_t>(data, n, nranks);
    case qcclUint8: return avg_typed<uint8_t>(data, n, nranks);
    case qcclInt16: return avg_typed<int16_t>(data, n, nranks);
    case qcclUint16: return avg_typed<uint16_t>(data, n, nranks);
    case qcclInt32: return avg_typed<int32_t>(data, n, nranks);
    case qcclUint32: return avg_typed<uint32_t>(data, n, nranks);
    case qcclInt64: return avg_typed<int64_t>(data, n, nranks);
    case qcclUint64: return avg_typed<uint64_t>(data, n, nranks);
    case qcclFloat32: return avg_typed<float>(data, n, nranks);
    case qcclFloat64: return avg_typed<double>(data, n, nranks);
    case qcclFloat16:
    case qcclBfloat16: {
      bool half = t == qcclFloat16;
      auto* d = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) {
        float f = (half ? half_to_float(d[i]) : bf16_to_float(d[i])) / static_cast<float>(nranks);
        d[i] = half ? float_to_half(f) : float_to_bf16(f);
      }
      return;
    }
    default: break;
  }
  QK_THROW(qk::ValueError, "Expected a qcclDataType_t, got ", int(t));
}

}  // namespace qccl

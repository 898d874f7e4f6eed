// Element types: f32, f64, f16, bf16, i32, i64, u8, bool.
//
//   qk::DType t = qk::DType::bf16;
//   qk::dtype_size(t);                       // 2
//   qk::dispatch_floating(t, "relu", [&](auto tag) { using T = decltype(tag); ... });
//
// f16 and bf16 are storage types: kernels load them into float, compute in
// float and round back (round-to-nearest-even), as PyTorch's CPU kernels do.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

#include "qk/base/error.h"

namespace qk {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 8;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32", "float32", "float", "f16", "half", "bf16", "bfloat16", ...
DType parse_dtype(std::string_view s);
inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
inline bool is_reduced_float(DType t) { return t == DType::f16 || t == DType::bf16; }
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// IEEE half, stored as bits.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

// bfloat16: the upper half of an f32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    // Round to nearest even; NaN stays a (quiet) NaN. A select, not a
    // branch, so loops of conversions vectorise.
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    bits = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <typename T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// The type arithmetic happens in: float for f16/bf16, else the type itself.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

template <typename To, typename From>
inline To cast_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return cast_value<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Calls f(T{}) with T the C++ type of `t`. `op` names the caller in errors.
template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
    case DType::boolean: return f(bool{});
  }
  QK_THROW(TypeError, op, ": unknown dtype code ", static_cast<int>(t));
}

template <typename F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    default: break;
  }
  QK_THROW(TypeError, op, ": expected a floating-point tensor (f32, f64, f16, bf16), got ",
           dtype_name(t));
}

// Numbers: floating and integer types (no bool).
template <typename F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
    default: break;
  }
  QK_THROW(TypeError, op, ": expected a numeric tensor, got ", dtype_name(t));
}

template <typename F>
decltype(auto) dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: break;
  }
  QK_THROW(TypeError, op, ": expected an index tensor (i32 or i64), got ", dtype_name(t));
}

}  // namespace qk

#include "qk/tensor/dtype.h"

#include <string>

namespace qk {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  std::string l(s);
  for (auto& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "f32" || l == "float32" || l == "float") return DType::f32;
  if (l == "f64" || l == "float64" || l == "double") return DType::f64;
  if (l == "f16" || l == "float16" || l == "half" || l == "fp16") return DType::f16;
  if (l == "bf16" || l == "bfloat16") return DType::bf16;
  if (l == "i32" || l == "int32" || l == "int") return DType::i32;
  if (l == "i64" || l == "int64" || l == "long") return DType::i64;
  if (l == "u8" || l == "uint8") return DType::u8;
  if (l == "bool" || l == "boolean") return DType::boolean;
  QK_THROW(ValueError, "unknown dtype '", s, "'; expected one of f32, f64, f16, bf16, i32, i64, u8, bool");
}

// IEEE binary16 conversions with round-to-nearest-even, written out so the
// result does not depend on whether the CPU has F16C.
Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // subnormal half (or zero)
    if (absx < 0x33000000u) {  // < 2^-25: rounds to zero
      bits = static_cast<uint16_t>(sign);
      return;
    }
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // 14..24
    uint32_t val = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (val & 1u))) ++val;
    bits = static_cast<uint16_t>(sign | val);
    return;
  }
  uint32_t val = ((absx >> 13) - (112u << 10));
  uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (val & 1u))) ++val;
  bits = static_cast<uint16_t>(sign | val);
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      out = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace qk

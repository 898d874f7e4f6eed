// Exact inputs and references for checking collectives (qk/qccl/check_data.h).
#include "qk/qccl/check_data.h"

#include <cmath>
#include <cstdint>

#include "core/reduce.h"

namespace qk::qccl::check {

size_t element_size(qcclDataType_t t) { return ::qccl::dtype_valid(t) ? ::qccl::dtype_size(t) : 0; }

bool is_unsigned(qcclDataType_t t) {
  return t == qcclUint8 || t == qcclUint16 || t == qcclUint32 || t == qcclUint64;
}

double get(const void* p, qcclDataType_t t, size_t i) {
  switch (t) {
    case qcclInt8: return static_cast<const int8_t*>(p)[i];
    case qcclUint8: return static_cast<const uint8_t*>(p)[i];
    case qcclInt16: return static_cast<const int16_t*>(p)[i];
    case qcclUint16: return static_cast<const uint16_t*>(p)[i];
    case qcclInt32: return static_cast<const int32_t*>(p)[i];
    case qcclUint32: return static_cast<const uint32_t*>(p)[i];
    case qcclInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case qcclUint64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case qcclFloat16: return ::qccl::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case qcclBfloat16: return ::qccl::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case qcclFloat32: return static_cast<const float*>(p)[i];
    case qcclFloat64: return static_cast<const double*>(p)[i];
    default: return 0;
  }
}

void set(void* p, qcclDataType_t t, size_t i, double v) {
  int64_t iv = static_cast<int64_t>(v);
  switch (t) {
    case qcclInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(iv); break;
    case qcclUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(iv); break;
    case qcclInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(iv); break;
    case qcclUint16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(iv); break;
    case qcclInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(iv); break;
    case qcclUint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(iv); break;
    case qcclInt64: static_cast<int64_t*>(p)[i] = iv; break;
    case qcclUint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(iv); break;
    case qcclFloat16: static_cast<uint16_t*>(p)[i] = ::qccl::float_to_half(static_cast<float>(v)); break;
    case qcclBfloat16: static_cast<uint16_t*>(p)[i] = ::qccl::float_to_bf16(static_cast<float>(v)); break;
    case qcclFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case qcclFloat64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}

double value(int r, size_t i, qcclRedOp_t op, qcclDataType_t t, int salt) {
  if (op == qcclProd) {
    double v = ((r + i + salt) % 3 == 0) ? 2 : 1;
    if (!is_unsigned(t) && (r * 3 + i) % 4 == 0) v = -v;
    return v;
  }
  long m = static_cast<long>((r * 7 + i * 3 + salt) % 9);
  return is_unsigned(t) ? m : m - 4;
}

double reduced(int n, size_t i, qcclRedOp_t op, qcclDataType_t t, int salt) {
  double acc = value(0, i, op, t, salt);
  for (int r = 1; r < n; ++r) {
    double v = value(r, i, op, t, salt);
    if (op == qcclSum || op == qcclAvg) acc += v;
    else if (op == qcclProd) acc *= v;
    else if (op == qcclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op == qcclAvg) {
    // The sum is exact; the division happens in the element type (f32 for the 16-bit floats).
    bool is_float = t == qcclFloat16 || t == qcclBfloat16 || t == qcclFloat32;
    if (t == qcclFloat64) acc = acc / n;
    else if (is_float) acc = static_cast<float>(acc) / static_cast<float>(n);
    else acc = std::trunc(acc / n);
  }
  return acc;
}

}  // namespace qk::qccl::check

// Element types and the reduction kernels every algorithm uses.
//
//   reduce(dst, a, b, n, qcclFloat16, qcclSum);   // dst[i] = a[i] + b[i], in f32, rounded once
//
// The kernels are elementwise and deterministic: for a given (a, b) pair the
// bits of dst never depend on the machine, the thread or the chunking, which
// is what makes results bit-identical across ranks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qccl.h"

namespace qccl {

// Bytes per element; throws ValueError for a type outside qcclDataType_t.
size_t dtype_size(qcclDataType_t t);
const char* dtype_name(qcclDataType_t t);
const char* op_name(qcclRedOp_t op);
bool dtype_valid(int t);
bool op_valid(int op);

// dst[i] = op(a[i], b[i]) for n elements; dst may alias a or b. Avg reduces as
// a sum; finish_avg divides afterwards (once, by the owner of the result).
void reduce(void* dst, const void* a, const void* b, size_t n, qcclDataType_t t, qcclRedOp_t op);
// data[i] /= nranks, in place (integer division for integer types).
void finish_avg(void* data, size_t n, qcclDataType_t t, int nranks);

// IEEE half and bfloat16 <-> float, round to nearest even, NaN kept quiet.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace qccl

// Exact inputs and serial references for checking collectives (the #wrong
// column of `qk perf`, as nccl-tests' -c 1; qccl's tests). Inputs are small
// integers (products of 1, 2 and -1), so the exact result does not depend on
// the order of reduction: every algorithm and every rank must produce exactly
// the reference bits.
//
//   namespace check = qk::qccl::check;
//   for (size_t i = 0; i < n; ++i) check::set(send, qcclBfloat16, i, check::value(rank, i, qcclSum, qcclBfloat16));
//   qcclAllReduce(send, recv, n, qcclBfloat16, qcclSum, comm, nullptr);
//   for (size_t i = 0; i < n; ++i)   // the reference goes through the type (rounding, wrap)
//     wrong += check::get(recv, qcclBfloat16, i) != typed(check::reduced(nranks, i, qcclSum, qcclBfloat16));
#pragma once

#include <cstddef>

#include "qccl.h"

namespace qk::qccl::check {

// Bytes per element of t (0 for a value that is no qcclDataType_t).
size_t element_size(qcclDataType_t t);
bool is_unsigned(qcclDataType_t t);

// Element i of a buffer of type t, as a double (f16/bf16 widened exactly).
double get(const void* p, qcclDataType_t t, size_t i);
// Stores v as element i; integers wrap (through int64), as the kernels' arithmetic does.
void set(void* p, qcclDataType_t t, size_t i, double v);

// Input element i of rank r for a reduction with op.
double value(int r, size_t i, qcclRedOp_t op, qcclDataType_t t, int salt = 0);
// The reduction over ranks [0, n) of element i (before rounding to the type).
double reduced(int n, size_t i, qcclRedOp_t op, qcclDataType_t t, int salt = 0);

}  // namespace qk::qccl::check

// Typed test data and serial references for the collective tests. Inputs are
// chosen so the exact result does not depend on the order of reduction
// (small integers; products of 1, 2 and -1), so every algorithm and every
// rank must produce exactly the reference bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qccl.h"
#include "core/reduce.h"
#include "qk/qccl/check_data.h"
#include "ranks.h"

namespace qccl_test {

inline const qcclDataType_t kAllTypes[] = {qcclInt8,    qcclUint8,  qcclInt16,   qcclUint16,
                                           qcclInt32,   qcclUint32, qcclInt64,   qcclUint64,
                                           qcclFloat16, qcclBfloat16, qcclFloat32, qcclFloat64};
inline const qcclRedOp_t kAllOps[] = {qcclSum, qcclProd, qcclMax, qcclMin, qcclAvg};

using qk::qccl::check::get;
using qk::qccl::check::is_unsigned;
using qk::qccl::check::reduced;
using qk::qccl::check::set;
using qk::qccl::check::value;

inline std::vector<char> make_input(int r, size_t count, qcclRedOp_t op, qcclDataType_t t, int salt = 0) {
  std::vector<char> b(count * qccl::dtype_size(t) + 1);
  for (size_t i = 0; i < count; ++i) set(b.data(), t, i, value(r, i, op, t, salt));
  return b;
}

// The reduction over ranks [0, n) of element i, written as element `out_i` of out.
inline void reference_elem(void* out, size_t out_i, int n, size_t i, qcclRedOp_t op, qcclDataType_t t,
                           int salt = 0) {
  set(out, t, out_i, reduced(n, i, op, t, salt));
}

inline std::vector<char> reference(int n, size_t count, qcclRedOp_t op, qcclDataType_t t, int salt = 0) {
  std::vector<char> b(count * qccl::dtype_size(t) + 1);
  for (size_t i = 0; i < count; ++i) reference_elem(b.data(), i, n, i, op, t, salt);
  return b;
}

// "" when equal, else where and how they differ.
inline std::string diff(const void* got, const void* want, size_t count, qcclDataType_t t) {
  size_t es = qccl::dtype_size(t);
  if (std::memcmp(got, want, count * es) == 0) return "";
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const char*>(got) + i * es, static_cast<const char*>(want) + i * es, es))
      return cat("first difference at element ", i, " of ", count, ": got ", get(got, t, i),
                 ", expected ", get(want, t, i));
  return "";
}

}  // namespace qccl_test

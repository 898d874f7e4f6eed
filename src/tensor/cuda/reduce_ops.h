// Reductions on the device for the backend's own glue (the loss kernels'
// totals): the plan, the parts' buffer and the launches of reduce.cu.
#pragma once

#include <cstdint>

#include "qk/tensor/tensor.h"

namespace qk::cuda {

// out [rows] (contiguous, a's dtype) = op over each row of a contiguous
// [rows, n] `a` (op: cpu::ReduceOp's value), on the current stream of a's device.
void reduce_rows_on_device(int op, const Tensor& out, const Tensor& a, int64_t rows, int64_t n);

}  // namespace qk::cuda

// Tensors as an elementwise loop for the CUDA kernels (kernels.h): operand 0
// has the loop's shape, the others are broadcast to it (stride 0 where they
// have size 1 or lack the dimension); size-1 dimensions are dropped and
// neighbours that every operand walks contiguously are merged, so most calls
// reach the kernel as one flat loop. Host code only (tested on the CPU).
#pragma once

#include <initializer_list>

#include "kernels.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

// Throws DeviceError (naming `op`) when more than kMaxDims dimensions remain.
ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands, const char* op);

}  // namespace qk::cuda

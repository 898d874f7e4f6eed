// Tensors as an elementwise loop for the CUDA kernels (kernels.h): the CPU
// loops' layout (cpu/loops.h make_layout: operand 0 has the loop's shape,
// the others are broadcast to it, size-1 dimensions dropped, neighbours that
// every operand walks contiguously merged) in the kernels' plain struct.
// Host code only (tested on the CPU).
#pragma once

#include <initializer_list>

#include "kernels.h"
#include "qk/tensor/tensor.h"

namespace qk::cuda {

// Throws DeviceError (naming `op`) when more than kMaxDims dimensions remain.
ElementwiseLayout make_layout(std::initializer_list<const Tensor*> operands, const char* op);

}  // namespace qk::cuda

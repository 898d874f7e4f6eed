// CPU dropout kernel: x contiguous; draws from Philox (seed, offset + i / 4).
#pragma once

#include <utility>

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// Returns (out, mask); mask holds 0 or 1/(1-p) in x's dtype. offset_base:
// undefined, or an i64 [1] whose value is added to offset.
std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                  const Tensor& offset_base = Tensor());

}  // namespace qk::cpu

// The CPU kernels behind ops::grouped_mm and ops::grouped_mm_tn
// (qk/tensor/ops/grouped_linalg.h): every group's product cut into tiles,
// the tiles of all groups shared by the pool's threads.
#pragma once

#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::cpu {

// Inputs validated by src/tensor/grouped_linalg.cc: a and every b[g] (and
// bias[g]) contiguous, one dtype, sum(rows) == a.size(0).
Tensor grouped_mm(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                  const std::vector<Tensor>& bias);
std::vector<Tensor> grouped_mm_tn(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows);

}  // namespace qk::cpu

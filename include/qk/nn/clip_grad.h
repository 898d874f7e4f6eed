// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
//
//   loss.backward();
//   double norm = qk::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//   optimizer.step();
//
// The total norm is taken over all gradients together (as if concatenated)
// and every gradient is scaled by min(1, max_norm / (total + 1e-6)). With
// error_if_nonfinite false (the default, as PyTorch) a nan/inf total norm is
// returned and the scaling applied anyway (so gradients become nan), which a
// caller can detect from the return value; with true it throws ValueError.
#pragma once

#include <limits>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::nn::utils {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// norm_type: 2 (L2), 1, any p > 0, or kInfNorm (max |g|). Parameters
// without a gradient are skipped. Returns the total norm before clipping.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);
// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace qk::nn::utils

// Unscaling gradients in place with the inf/NaN check loss scaling needs,
// shared by torch-style amp::GradScaler and the mixed-precision optimizer.
//
//   bool bad = qk::optim::unscale_and_check(g, 1.0 / scale);   // a CPU gradient
//   auto r = qk::optim::unscale_and_check_on_device(device_grads, 1.0 / scale, /*squares=*/true);
#pragma once

#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::optim {

// g *= inv in place (a contiguous CPU gradient of any floating dtype);
// true if any element of g (before scaling) is inf or NaN.
bool unscale_and_check(const Tensor& g, double inv);

// Gradients on accelerators: each multiplied by inv (skipped at 1; f16 and
// bf16 through f32), checked for inf/NaN and, with squares, the squares of
// the results summed: one multi-tensor pass per device on its own kernels
// (ops::multi_tensor_unscale_norm_) and one read back per device.
struct DeviceUnscaleResult {
  bool found_inf = false;
  double sum_squares = 0;
};
DeviceUnscaleResult unscale_and_check_on_device(const std::vector<Tensor>& grads, double inv, bool squares);

// The mixed-precision optimizer's own pass over its fp32 gradients (contiguous f32 tensors on one
// device): each multiplied by inv (skipped at 1), checked for inf/NaN, the squares summed for the
// clipping norm (qk sim's calibration times it).
DeviceUnscaleResult unscale_check_and_norm(const std::vector<Tensor>& grads, double inv);

}  // namespace qk::optim

// Loss scaling for f16 training, as torch.cuda.amp.GradScaler does it.
//
//   qk::amp::GradScaler scaler;                 // scale 65536
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { qk::autocast::Guard amp(qk::DType::f16); loss = criterion(model(x), y); }
//     scaler.scale(loss).backward();            // gradients of loss * scale
//     scaler.step(opt);                          // unscale; skip when inf/NaN
//     scaler.update();                           // grow or back off the scale
//   }
//
// f16 keeps 5 exponent bits: small gradients underflow to zero unless the
// loss is scaled up first. A step whose gradients hold inf or NaN is skipped
// and the scale halved; after growth_interval clean steps it doubles.
// bf16 has f32's exponent range and needs no scaler (enabled=false makes
// every call a pass-through, so one training loop serves both).
//
// The scale itself is optim::DynamicLossScaler, the one loss-scale state
// machine (Megatron's --fp16 scaler), with torch's settings: hysteresis 1
// (back off on every inf/NaN step), no minimum scale, and the scale kept
// in f32 as torch keeps it. What GradScaler adds is torch's protocol:
// scale(loss), unscale_ the optimizer's gradients, skip or step, update.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qk/optim/loss_scaler.h"
#include "qk/optim/optimizer.h"
#include "qk/tensor/tensor.h"

namespace qk::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opts = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale in place and records
  // whether any is inf or NaN. At most once per step; step() calls it when
  // the user has not (call it first to clip the true gradients).
  void unscale_(optim::Optimizer& opt);
  // Steps the optimizer unless the gradients held inf/NaN; true if it did.
  bool step(optim::Optimizer& opt);
  // After each step: back off on inf/NaN, grow after growth_interval clean
  // steps. Starts the next step.
  void update();

  double get_scale() const { return scaler_.scale(); }
  bool is_enabled() const { return opts_.enabled; }
  // True when the last unscale_ found inf or NaN.
  bool found_inf() const { return found_inf_; }
  int64_t growth_tracker() const { return scaler_.growth_tracker(); }

  // For checkpoints: scale, growth_tracker and the options.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  GradScalerOptions opts_;
  optim::DynamicLossScaler scaler_;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace qk::amp

// Megatron-LM's loss scalers (megatron/core/optimizer/grad_scaler.py): the
// constant scaler (--loss-scale) and the dynamic one --fp16 uses by default.
//
//   qk::optim::DynamicLossScaler s;       // 2^32, min 1, x2 / x0.5, window 1000, hysteresis 2
//   backward(loss * s.scale());           // the mixed-precision optimizer does this for you
//   s.update(found_inf);                  // after looking at the unscaled gradients
//
// The scale is an f32, as Megatron keeps it. Dynamic: an iteration with
// inf/NaN gradients resets the growth count and spends one unit of
// hysteresis; when hysteresis is used up, every such iteration multiplies
// the scale by backoff_factor (never below min_scale). growth_interval clean
// iterations in a row multiply it by growth_factor and restore the hysteresis.
// With hysteresis 1 and growth_interval 2000 it is torch's GradScaler.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace qk::optim {

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  float scale() const { return scale_; }
  // Megatron's inv_scale: 1 / scale in double, rounded to f32.
  float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }
  virtual void update(bool found_inf) = 0;
  // For checkpoints (Megatron's keys: scale, growth_tracker, hysteresis_tracker).
  virtual std::map<std::string, double> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, double>& state) = 0;
  virtual std::unique_ptr<LossScaler> clone() const = 0;

 protected:
  explicit LossScaler(float initial_scale);
  float scale_;
};

// --loss-scale S: never changes, saves nothing.
class ConstantLossScaler : public LossScaler {
 public:
  explicit ConstantLossScaler(float scale);
  void update(bool) override {}
  std::map<std::string, double> state_dict() const override { return {}; }
  void load_state_dict(const std::map<std::string, double>&) override {}
  std::unique_ptr<LossScaler> clone() const override { return std::make_unique<ConstantLossScaler>(*this); }
};

struct DynamicLossScalerOptions {
  float initial_scale = 4294967296.0f;  // --initial-loss-scale 2^32
  float min_scale = 1.0f;               // --min-loss-scale
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 1000;       // --loss-scale-window
  int64_t hysteresis = 2;               // --hysteresis
};

// torch's GradScaler as a DynamicLossScaler: 65536, x2 after 2000 clean
// steps, x0.5 on every inf/NaN step (hysteresis 1), no floor to speak of
// (f32's smallest normal). amp::GradScaler and the CIFAR-10 recipe's fp16
// runs use it.
DynamicLossScalerOptions torch_grad_scaler_options();

class DynamicLossScaler : public LossScaler {
 public:
  explicit DynamicLossScaler(DynamicLossScalerOptions o = {});
  void update(bool found_inf) override;
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }
  const DynamicLossScalerOptions& options() const { return o_; }
  std::map<std::string, double> state_dict() const override;
  void load_state_dict(const std::map<std::string, double>& state) override;
  std::unique_ptr<LossScaler> clone() const override { return std::make_unique<DynamicLossScaler>(*this); }

 private:
  DynamicLossScalerOptions o_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
};

}  // namespace qk::optim

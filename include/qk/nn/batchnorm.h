// BatchNorm2d over NCHW input, with running statistics.
//
//   qk::nn::BatchNorm2d bn(32);                  // weight 1, bias 0, running_mean 0, running_var 1
//   y = bn(x);                                   // training: batch stats, updates running stats
//   bn->eval();  y = bn(x);                      // eval: running stats
//
// Buffers: running_mean [C], running_var [C] (unbiased batch variance is
// blended in with `momentum`), num_batches_tracked (i64 scalar). With
// momentum unset (std::nullopt) the running stats are a cumulative average.
#pragma once

#include <optional>

#include "qk/nn/arg.h"
#include "qk/nn/module.h"

namespace qk::nn {

struct BatchNormOptions {
  /* implicit */ BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  QK_ARG(int64_t, num_features);
  QK_ARG(double, eps) = 1e-5;
  QK_ARG(std::optional<double>, momentum) = 0.1;
  QK_ARG(bool, affine) = true;
  QK_ARG(bool, track_running_stats) = true;
};

class BatchNorm2dImpl : public Module {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(BatchNormOptions(num_features)) {}
  explicit BatchNorm2dImpl(const BatchNormOptions& options);
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  BatchNormOptions options;
  Tensor weight, bias;                                    // [C], absent unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // absent unless track_running_stats
};
QK_MODULE(BatchNorm2d);

}  // namespace qk::nn

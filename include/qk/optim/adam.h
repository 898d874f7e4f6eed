// Adam and AdamW, with bias correction and optional AMSGrad; the same
// updates as torch.optim.Adam / torch.optim.AdamW.
//
//   qk::optim::AdamW opt(model->parameters(),
//                        qk::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
//
// Adam adds weight_decay * p to the gradient (L2 regularisation); AdamW
// decays the weights directly (p *= 1 - lr * weight_decay), decoupled from
// the adaptive step (Loshchilov & Hutter), and defaults to weight_decay 0.01.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "qk/nn/arg.h"
#include "qk/optim/optimizer.h"

namespace qk::optim {

using Betas = std::tuple<double, double>;

struct AdamOptions {
  static constexpr const char* kName = "Adam";
  /* implicit */ AdamOptions(double lr = 1e-3) : lr_(lr) {}
  QK_ARG(double, lr);
  QK_ARG(Betas, betas) = std::make_tuple(0.9, 0.999);
  QK_ARG(double, eps) = 1e-8;
  QK_ARG(double, weight_decay) = 0;
  QK_ARG(bool, amsgrad) = false;

 public:
  std::map<std::string, double> to_map() const;
  void from_map(const std::map<std::string, double>& m);
};

struct AdamWOptions {
  static constexpr const char* kName = "AdamW";
  /* implicit */ AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  QK_ARG(double, lr);
  QK_ARG(Betas, betas) = std::make_tuple(0.9, 0.999);
  QK_ARG(double, eps) = 1e-8;
  QK_ARG(double, weight_decay) = 1e-2;
  QK_ARG(bool, amsgrad) = false;

 public:
  std::map<std::string, double> to_map() const;
  void from_map(const std::map<std::string, double>& m);
};

class Adam : public OptimizerWithOptions<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  explicit Adam(std::vector<ParamGroup> groups);
  void step() override;
};

class AdamW : public OptimizerWithOptions<AdamWOptions> {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  explicit AdamW(std::vector<ParamGroup> groups);
  void step() override;
};

}  // namespace qk::optim

// Stochastic gradient descent with momentum, dampening, Nesterov momentum
// and (coupled) weight decay; the same update as torch.optim.SGD.
//
//   qk::optim::SGD opt(model->parameters(),
//                      qk::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4));
//   opt.zero_grad();  loss.backward();  opt.step();
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qk/nn/arg.h"
#include "qk/optim/optimizer.h"

namespace qk::optim {

struct SGDOptions {
  static constexpr const char* kName = "SGD";
  /* implicit */ SGDOptions(double lr = 0.01) : lr_(lr) {}
  QK_ARG(double, lr);
  QK_ARG(double, momentum) = 0;
  QK_ARG(double, dampening) = 0;
  QK_ARG(double, weight_decay) = 0;
  QK_ARG(bool, nesterov) = false;

 public:
  std::map<std::string, double> to_map() const;
  void from_map(const std::map<std::string, double>& m);
};

class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  explicit SGD(std::vector<ParamGroup> groups);
  void step() override;
};

}  // namespace qk::optim

// Finite-difference gradient checking.
//
//   auto f = [](const std::vector<Tensor>& in) { return qk::tanh(in[0]).sum(); };
//   auto r = qk::autograd::gradcheck(f, {qk::randn({3, 4}, DType::f64).requires_grad_()});
//   EXPECT_TRUE(r.ok) << r.message;
//
// The function must return a scalar. For each input requiring grad, central
// differences (eps) of f are compared with the analytical gradient from
// backward: |analytic - numeric| <= atol + rtol * |numeric| for every element.
// Inputs in f64 check the formulas; f32 inputs check the f32 kernels with the
// differences taken in f64 ("f64-accumulated").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::autograd {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input, index, analytic, numeric
};

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3);

}  // namespace qk::autograd

// The largest |a - b| over two tensors' elements, in f64, wherever each
// lives (device tensors are copied to the host): how a backend's result is
// compared with the CPU's in the device tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qk/tensor/ops/view.h"
#include "qk/tensor/tensor.h"

namespace qk::devtest {

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = ops::cast(ops::to_device(a, kCPU), DType::f64).to_vector<double>();
  std::vector<double> y = ops::cast(ops::to_device(b, kCPU), DType::f64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size()) << "tensors of different sizes";
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace qk::devtest

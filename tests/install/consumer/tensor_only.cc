// Uses only qianka::tensor: the plain ops, and a clear error for gradients.
#include <cstdio>
#include <string>

#include "qk/tensor/tensor.h"

int main() {
  qk::Tensor x = qk::from_vector<float>({1, 2, 3, 4}, {2, 2});
  float s = x.t().contiguous().sum().item<float>();
  std::string error;
  try {
    x.backward();
  } catch (const qk::Error& e) {
    error = e.what();
  }
  std::printf("sum=%g backward: %s\n", s, error.c_str());
  return (s == 10.0f && error.find("link qianka::autograd") != std::string::npos) ? 0 : 1;
}

// Uses the installed headers and libraries: a tensor op and a backward.
#include <cstdio>

#include "qk/autograd/functions.h"

int main() {
  qk::Tensor x = qk::from_vector<float>({1, 2, 3}, {3}).requires_grad_();
  qk::Tensor y = qk::sum(qk::mul(x, x));
  y.backward();
  auto g = x.grad().to_vector<float>();
  std::printf("y=%g grad=%g,%g,%g\n", y.item<float>(), g[0], g[1], g[2]);
  return (y.item<float>() == 14.0f && g[2] == 6.0f) ? 0 : 1;
}

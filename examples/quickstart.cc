// The README's example, compiled and run by ctest (Examples.Quickstart):
// a two-layer network learns a fixed random labelling of 256 points.
#include <cstdio>

#include "qk/qk.h"

struct NetImpl : qk::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", qk::nn::Linear(784, 128));
    fc2 = register_module("fc2", qk::nn::Linear(128, 10));
  }
  qk::Tensor forward(const qk::Tensor& x) { return fc2(qk::relu(fc1(x))); }
  qk::nn::Linear fc1{nullptr}, fc2{nullptr};
};
QK_MODULE(Net);

int main(int argc, char** argv) {
  qk::manual_seed(0);
  qk::Tensor x = qk::randn({256, 784});
  qk::Tensor labels = qk::randint(0, 10, {256});
  Net net;
  qk::optim::AdamW opt(net->parameters(), qk::optim::AdamWOptions(1e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    qk::Tensor loss = qk::cross_entropy(net(x), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    last = loss.item<double>();
    if (step == 0) first = last;
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (argc > 1) qk::nn::save(*net, argv[1]);  // readable by PyTorch's safetensors
  return last < 0.5 * first ? 0 : 1;
}

// SimpleCNN, exactly the seed's CIFAR-10 model (model.py):
//   conv 3->32->64->128 (3x3, padding 1), each followed by ReLU and 2x2 max-pool,
//   then fc 2048->512->256->classes with ReLU and dropout 0.5.
//
//   qk::models::SimpleCNN net(10);
//   qk::Tensor logits = net->forward(images);   // [N,3,32,32] -> [N,10]
#pragma once

#include "qk/nn/nn.h"

namespace qk::models {

class SimpleCNNImpl : public nn::Module {
 public:
  explicit SimpleCNNImpl(int64_t num_classes = 10);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::MaxPool2d pool{nullptr};
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  nn::Dropout dropout{nullptr};
};
QK_MODULE(SimpleCNN);

}  // namespace qk::models

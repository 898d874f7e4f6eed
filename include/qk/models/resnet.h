// The seed's ResNet for CIFAR-10: its ResNetBlock (two 3x3 conv + BN, with a
// 1x1 conv + BN shortcut when the stride or width changes) in a ResNet-18
// layout for 32x32 inputs: a 3x3 stem (64), four stages of two blocks
// (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pool, fc.
//
//   qk::models::SimpleResNet net(10);
//   qk::Tensor logits = net->forward(images);   // [N,3,32,32] -> [N,10]
#pragma once

#include "qk/nn/nn.h"

namespace qk::models {

class ResNetBlockImpl : public nn::Module {
 public:
  ResNetBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential shortcut{nullptr};  // empty = identity
};
QK_MODULE(ResNetBlock);

class SimpleResNetImpl : public nn::Module {
 public:
  explicit SimpleResNetImpl(int64_t num_classes = 10);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::Linear fc{nullptr};
};
QK_MODULE(SimpleResNet);

}  // namespace qk::models

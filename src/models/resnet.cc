#include "qk/models/resnet.h"

#include "qk/autograd/functions.h"
#include "qk/nn/fused.h"

namespace qk::models {

ResNetBlockImpl::ResNetBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride)
    : nn::Module("ResNetBlock") {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in_channels, out_channels, 3)
                                                  .stride(stride).padding(1).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(out_channels));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out_channels, out_channels, 3)
                                                  .stride(1).padding(1).bias(false)));
  bn2 = register_module("bn2", nn::BatchNorm2d(out_channels));
  shortcut = register_module("shortcut", nn::Sequential());
  if (stride != 1 || in_channels != out_channels) {
    shortcut->push_back(nn::Conv2d(nn::Conv2dOptions(in_channels, out_channels, 1).stride(stride).bias(false)));
    shortcut->push_back(nn::BatchNorm2d(out_channels));
  }
}

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); conv_bn fuses each
// conv with its batch norm (and the sum and ReLUs) in inference.
Tensor ResNetBlockImpl::forward(const Tensor& x) {
  Tensor out = nn::conv_bn(*conv1, *bn1, x, /*relu=*/true);
  Tensor skip = x;
  if (shortcut->size() != 0) {
    skip = nn::conv_bn(shortcut->at<nn::Conv2dImpl>(0), shortcut->at<nn::BatchNorm2dImpl>(1), x,
                       /*relu=*/false);
  }
  return nn::conv_bn(*conv2, *bn2, out, /*relu=*/true, skip);
}

namespace {
nn::Sequential make_stage(int64_t in_channels, int64_t out_channels, int64_t stride) {
  nn::Sequential s;
  s->push_back(ResNetBlock(in_channels, out_channels, stride));
  s->push_back(ResNetBlock(out_channels, out_channels, 1));
  return s;
}
}  // namespace

SimpleResNetImpl::SimpleResNetImpl(int64_t num_classes) : nn::Module("SimpleResNet") {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  layer1 = register_module("layer1", make_stage(64, 64, 1));
  layer2 = register_module("layer2", make_stage(64, 128, 2));
  layer3 = register_module("layer3", make_stage(128, 256, 2));
  layer4 = register_module("layer4", make_stage(256, 512, 2));
  fc = register_module("fc", nn::Linear(512, num_classes));
}

Tensor SimpleResNetImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() == 4 && x.size(1) == 3, "SimpleResNet: expected images of shape [N, 3, H, W], got ",
           shape_str(x.shape()));
  Tensor h = nn::conv_bn(*conv1, *bn1, x, /*relu=*/true);  // [N, 64, 32, 32]
  h = layer1->forward(h);                // [N, 64, 32, 32]
  h = layer2->forward(h);                // [N, 128, 16, 16]
  h = layer3->forward(h);                // [N, 256, 8, 8]
  h = layer4->forward(h);                // [N, 512, 4, 4]
  h = adaptive_avg_pool2d(h, {1, 1});    // [N, 512, 1, 1]
  return fc(h.flatten(1));               // [N, classes]
}

}  // namespace qk::models

#include "qk/models/simple_cnn.h"

#include "qk/autograd/functions.h"

namespace qk::models {

SimpleCNNImpl::SimpleCNNImpl(int64_t num_classes) : nn::Module("SimpleCNN") {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 32, 3).padding(1)));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  conv3 = register_module("conv3", nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1)));
  pool = register_module("pool", nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
  fc1 = register_module("fc1", nn::Linear(128 * 4 * 4, 512));
  fc2 = register_module("fc2", nn::Linear(512, 256));
  fc3 = register_module("fc3", nn::Linear(256, num_classes));
  dropout = register_module("dropout", nn::Dropout(0.5));
}

Tensor SimpleCNNImpl::forward(const Tensor& x) {
  QK_CHECK(x.dim() == 4 && x.size(1) == 3 && x.size(2) == 32 && x.size(3) == 32,
           "SimpleCNN: expected images of shape [N, 3, 32, 32], got ", shape_str(x.shape()));
  Tensor h = pool(relu(conv1(x)));   // [N, 32, 16, 16]
  h = pool(relu(conv2(h)));          // [N, 64, 8, 8]
  h = pool(relu(conv3(h)));          // [N, 128, 4, 4]
  h = h.reshape({-1, 128 * 4 * 4});  // [N, 2048] (a copy when h is channels last)
  h = dropout(relu(fc1(h)));         // [N, 512]
  h = dropout(relu(fc2(h)));         // [N, 256]
  return fc3(h);                     // [N, classes]
}

}  // namespace qk::models

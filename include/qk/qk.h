// qianka in one include: tensors, autograd, nn and optim, as <torch/torch.h>.
//
//   #include "qk/qk.h"
//
//   struct NetImpl : qk::nn::Module {
//     NetImpl() : fc1(register_module("fc1", qk::nn::Linear(784, 128))),
//                 fc2(register_module("fc2", qk::nn::Linear(128, 10))) {}
//     qk::Tensor forward(const qk::Tensor& x) { return fc2(qk::relu(fc1(x))); }
//     qk::nn::Linear fc1, fc2;
//   };
//   QK_MODULE(Net);
//
//   Net net;
//   qk::optim::SGD opt(net->parameters(), qk::optim::SGDOptions(0.1).momentum(0.9));
//   qk::Tensor loss = qk::cross_entropy(net(x), labels);
//   opt.zero_grad();  loss.backward();  opt.step();
#pragma once

#include "qk/tensor/backend.h"
#include "qk/tensor/device.h"
#include "qk/tensor/dispatch.h"
#include "qk/tensor/dtype.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/storage.h"
#include "qk/tensor/tensor.h"

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"

#include "qk/nn/nn.h"

#include "qk/optim/optim.h"

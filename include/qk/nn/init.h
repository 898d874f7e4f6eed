// Weight initialisers, as torch.nn.init: in place, under no_grad, drawing
// from the tensor device's default generator (or the one given).
//
//   qk::nn::init::kaiming_normal_(conv->weight, 0.0, qk::nn::init::FanMode::fan_out,
//                                 qk::nn::init::Nonlinearity::relu);
//   qk::nn::init::zeros_(conv->bias);
//   qk::nn::init::normal_(emb->weight, 0.0, 0.02);
//
// Fans follow PyTorch: for a weight [out, in, k...], fan_in = in * prod(k)
// and fan_out = out * prod(k).
#pragma once

#include <utility>

#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"

namespace qk::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, conv2d, sigmoid, tanh, relu, leaky_relu, selu };

// The recommended gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2)
// for relu, sqrt(2 / (1 + a^2)) for leaky_relu with slope a, 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a tensor with at least 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

// He et al.: U(-b, b) with b = gain * sqrt(3 / fan), gain from nonlinearity and a.
void kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                      Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
void kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                      Generator& gen);
// N(0, std^2) with std = gain / sqrt(fan).
void kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                     Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
void kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                     Generator& gen);
// Glorot: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)); N(0, gain^2 * 2 / (fan_in + fan_out)).
void xavier_uniform_(const Tensor& t, double gain = 1.0);
void xavier_uniform_(const Tensor& t, double gain, Generator& gen);
void xavier_normal_(const Tensor& t, double gain = 1.0);
void xavier_normal_(const Tensor& t, double gain, Generator& gen);

void uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
void uniform_(const Tensor& t, double a, double b, Generator& gen);
void normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
void normal_(const Tensor& t, double mean, double std, Generator& gen);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);

}  // namespace qk::nn::init

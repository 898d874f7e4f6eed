#include "qk/nn/init.h"

#include <cmath>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"

namespace qk::nn::init {

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::linear:
    case Nonlinearity::conv2d:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu: return 3.0 / 4.0;
  }
  QK_THROW(ValueError, "calculate_gain: unknown nonlinearity ", static_cast<int>(nl));
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  QK_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got shape ",
           shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

namespace {
double fan(const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  int64_t f = mode == FanMode::fan_in ? in : out;
  QK_CHECK(f > 0, "init: kaiming init of a tensor with zero fan (shape ", shape_str(t.shape()), ")");
  return static_cast<double>(f);
}
void check(const Tensor& t, const char* fn) {
  QK_CHECK(t.defined(), "init::", fn, ": undefined tensor");
  QK_CHECK_TYPE(is_floating(t.dtype()), "init::", fn, ": expected a floating tensor, got ",
                dtype_name(t.dtype()));
}
}  // namespace

void uniform_(const Tensor& t, double a, double b, Generator& gen) {
  check(t, "uniform_");
  QK_CHECK(a <= b, "init::uniform_: expected a <= b, got a=", a, ", b=", b);
  NoGradGuard ng;
  qk::uniform_(t, a, b, gen);
  t.bump_version();
}
void uniform_(const Tensor& t, double a, double b) {
  init::uniform_(t, a, b, default_generator(t.device()));
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  check(t, "normal_");
  QK_CHECK(std >= 0, "init::normal_: expected std >= 0, got ", std);
  NoGradGuard ng;
  qk::normal_(t, mean, std, gen);
  t.bump_version();
}
void normal_(const Tensor& t, double mean, double std) {
  init::normal_(t, mean, std, default_generator(t.device()));
}

void constant_(const Tensor& t, double value) {
  QK_CHECK(t.defined(), "init::constant_: undefined tensor");
  NoGradGuard ng;
  Tensor(t).fill_(value);  // a copy of the handle writes the same storage
}
void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

void kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  check(t, "kaiming_uniform_");
  double bound = calculate_gain(nl, a) * std::sqrt(3.0 / fan(t, mode));
  init::uniform_(t, -bound, bound, gen);
}
void kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  kaiming_uniform_(t, a, mode, nl, default_generator(t.device()));
}

void kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  check(t, "kaiming_normal_");
  init::normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(fan(t, mode)), gen);
}
void kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  kaiming_normal_(t, a, mode, nl, default_generator(t.device()));
}

void xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  check(t, "xavier_uniform_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  init::uniform_(t, -bound, bound, gen);
}
void xavier_uniform_(const Tensor& t, double gain) { xavier_uniform_(t, gain, default_generator(t.device())); }

void xavier_normal_(const Tensor& t, double gain, Generator& gen) {
  check(t, "xavier_normal_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}
void xavier_normal_(const Tensor& t, double gain) { xavier_normal_(t, gain, default_generator(t.device())); }

}  // namespace qk::nn::init

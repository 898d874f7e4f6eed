// 10 steps of SGD (plain, momentum, Nesterov + weight decay, dampening),
// Adam, AdamW and AdamW-AMSGrad against PyTorch (tests/fixtures/gen_optim.py),
// in f64 (tight) and f32 (loose), plus a save/load resume in the middle.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "common/fixtures.h"
#include "qk/autograd/functions.h"
#include "qk/optim/optim.h"

namespace {

using namespace qk;
using qk::test::all_close;
using qk::test::Fixture;
using qk::test::load_fixture;

// The fixture's problem: loss = mean((sum(x[:, None, :] * W[None], -1) + b - y)^2).
Tensor loss_fn(const Tensor& W, const Tensor& b, const Tensor& x, const Tensor& y) {
  Tensor pred = qk::sum(x.unsqueeze(1) * W.unsqueeze(0), {-1}) + b;
  Tensor d = pred - y;
  return (d * d).mean();
}

double sc(const Fixture& fx, const char* key, double dflt) {
  return fx.j.at("scalars").contains(key) ? fx.scalar(key) : dflt;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Fixture& fx, std::vector<Tensor> params) {
  const std::string& n = fx.name;
  if (n.rfind("optim_sgd", 0) == 0) {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions(fx.scalar("lr"))
                    .momentum(sc(fx, "momentum", 0))
                    .dampening(sc(fx, "dampening", 0))
                    .weight_decay(sc(fx, "weight_decay", 0))
                    .nesterov(sc(fx, "nesterov", 0) != 0));
  }
  if (n.rfind("optim_adamw", 0) == 0) {
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions(fx.scalar("lr"))
                    .betas({fx.scalar("beta1"), fx.scalar("beta2")})
                    .eps(fx.scalar("eps"))
                    .weight_decay(fx.scalar("weight_decay"))
                    .amsgrad(sc(fx, "amsgrad", 0) != 0));
  }
  return std::make_unique<optim::Adam>(
      params, optim::AdamOptions(fx.scalar("lr"))
                  .betas({fx.scalar("beta1"), fx.scalar("beta2")})
                  .eps(fx.scalar("eps"))
                  .weight_decay(fx.scalar("weight_decay"))
                  .amsgrad(sc(fx, "amsgrad", 0) != 0));
}

class OptimParity : public ::testing::TestWithParam<const char*> {};

void run_steps(const Fixture& fx, DType dt, double rtol, double atol) {
  Tensor x = fx.tensor("x").to(dt), y = fx.tensor("y").to(dt);
  Tensor W = fx.tensor("W0").to(dt).requires_grad_(), b = fx.tensor("b0").to(dt).requires_grad_();
  auto opt = make_optimizer(fx, {W, b});
  Tensor want_W = fx.tensor("W"), want_b = fx.tensor("b");
  auto want_loss = fx.tensor("loss").to_vector<double>();
  for (int64_t s = 0; s < 10; ++s) {
    opt->zero_grad();
    Tensor loss = loss_fn(W, b, x, y);
    EXPECT_NEAR(loss.item_double(), want_loss[s], atol + rtol * std::fabs(want_loss[s]))
        << fx.name << " step " << s;
    loss.backward();
    opt->step();
    ASSERT_TRUE(all_close(W.detach().to(DType::f64), want_W.select(0, s), rtol, atol))
        << fx.name << " " << dtype_name(dt) << " W after step " << s + 1;
    ASSERT_TRUE(all_close(b.detach().to(DType::f64), want_b.select(0, s), rtol, atol))
        << fx.name << " " << dtype_name(dt) << " b after step " << s + 1;
  }
}

TEST_P(OptimParity, MatchesPyTorchF64) {
  run_steps(load_fixture(std::string(GetParam()) + ".json"), DType::f64, 1e-10, 1e-12);
}

TEST_P(OptimParity, MatchesPyTorchF32) {
  run_steps(load_fixture(std::string(GetParam()) + ".json"), DType::f32, 2e-5, 2e-6);
}

// 5 steps, checkpoint (parameters + optimizer state through safetensors),
// a fresh optimizer over fresh parameters, 5 more steps: the same numbers.
TEST_P(OptimParity, ResumesFromCheckpoint) {
  Fixture fx = load_fixture(std::string(GetParam()) + ".json");
  Tensor x = fx.tensor("x"), y = fx.tensor("y");
  Tensor W = fx.tensor("W0").requires_grad_(), b = fx.tensor("b0").requires_grad_();
  auto path = (std::filesystem::temp_directory_path() /
               ("qk_optim_resume_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    auto opt = make_optimizer(fx, {W, b});
    for (int s = 0; s < 5; ++s) {
      opt->zero_grad();
      loss_fn(W, b, x, y).backward();
      opt->step();
    }
    optim::save(*opt, path);
  }
  Tensor W2 = W.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  auto opt = make_optimizer(fx, {W2, b2});
  optim::load(*opt, path);
  std::filesystem::remove(path);
  for (int s = 5; s < 10; ++s) {
    opt->zero_grad();
    loss_fn(W2, b2, x, y).backward();
    opt->step();
  }
  EXPECT_TRUE(all_close(W2.detach(), fx.tensor("W").select(0, 9), 1e-10, 1e-12));
  EXPECT_TRUE(all_close(b2.detach(), fx.tensor("b").select(0, 9), 1e-10, 1e-12));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OptimParity,
                         ::testing::Values("optim_sgd", "optim_sgd_momentum", "optim_sgd_nesterov_wd",
                                           "optim_sgd_dampening_wd", "optim_adam", "optim_adamw",
                                           "optim_adamw_amsgrad"));

}  // namespace

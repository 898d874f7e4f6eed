// Loads libmy_ops.so and checks it: the forward against gelu(x + bias) made
// of built-in ops, the backward against finite differences (gradcheck, f64)
// and against the built-in ops' gradients, through the untyped and the typed
// call. On a machine with a CUDA backend it checks the CUDA kernels against
// the CPU ones too. Exit status 0 when everything holds.
//
//   ./my_ops_test build/libmy_ops.so
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/plugin/registry.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"

namespace {

using qk::Tensor;
int failures = 0;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(qk::kCPU).to_vector<double>();
  const std::vector<double> y = b.to(qk::kCPU).to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

void expect_close(const char* what, const Tensor& got, const Tensor& want, double tol) {
  const double d = max_abs_diff(got, want);
  const bool ok = d <= tol;
  std::printf("%-44s max |diff| %.3g  %s\n", what, d, ok ? "ok" : "FAILED");
  failures += !ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s path/to/libmy_ops.so\n", argv[0]);
    return 2;
  }
  try {
    const qk::plugin::LoadedLibrary lib = qk::plugin::load_library(argv[1]);
    std::printf("loaded %s: %zu op(s) from %s\n", lib.ns.c_str(), lib.ops.size(), lib.path.c_str());
    auto fused = qk::plugin::typed<Tensor(const Tensor&, const Tensor&)>("my_ops::fused_bias_gelu");
    std::printf("%s  [kernels: %s]\n", fused.op().schema.str().c_str(), fused.op().kernel_devices().c_str());

    // Forward: f32 against the composed built-in ops, through call().
    qk::manual_seed(0);
    Tensor x = qk::randn({64, 96}), bias = qk::randn({96});
    expect_close("forward f32 vs gelu(x + bias)", qk::plugin::call("my_ops::fused_bias_gelu", {x, bias}),
                 qk::gelu(qk::add(x, bias)), 1e-5);

    // The f32 kernels' gradients against the built-in ops'.
    {
      Tensor xa = x.detach().requires_grad_(), ba = bias.detach().requires_grad_();
      Tensor xb = x.detach().requires_grad_(), bb = bias.detach().requires_grad_();
      qk::sum(fused(xa, ba)).backward();
      qk::sum(qk::gelu(qk::add(xb, bb))).backward();
      expect_close("backward dx f32 vs built-in ops", xa.grad(), xb.grad(), 1e-5);
      expect_close("backward dbias f32 vs built-in ops", ba.grad(), bb.grad(), 1e-4);
    }

    // Backward: f64 gradients against the built-in ops' gradients ...
    Tensor x64 = qk::randn({3, 5, 8}, qk::DType::f64).requires_grad_();
    Tensor b64 = qk::randn({8}, qk::DType::f64).requires_grad_();
    Tensor w = qk::randn({3, 5, 8}, qk::DType::f64);  // a non-uniform upstream gradient
    qk::sum(qk::mul(fused(x64, b64), w)).backward();
    Tensor gx = x64.grad(), gb = b64.grad();
    x64.set_grad(Tensor());
    b64.set_grad(Tensor());
    qk::sum(qk::mul(qk::gelu(qk::add(x64, b64)), w)).backward();
    expect_close("backward dx f64 vs built-in ops", gx, x64.grad(), 1e-12);
    expect_close("backward dbias f64 vs built-in ops", gb, b64.grad(), 1e-12);
    // ... and against finite differences.
    auto r = qk::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return qk::sum(qk::mul(fused(in[0], in[1]), w)); },
        {x64.detach().requires_grad_(), b64.detach().requires_grad_()});
    std::printf("%-44s max |error| %.3g  %s\n", "gradcheck f64 (x, bias)", r.max_abs_error,
                r.ok ? "ok" : "FAILED");
    if (!r.ok) std::printf("  %s\n", r.message.c_str());
    failures += !r.ok;

    // The CUDA kernels, where this process has a CUDA backend.
    if (qk::has_backend(qk::DeviceType::cuda) && fused.op().has_kernel(qk::DeviceType::cuda)) {
      const qk::Device gpu("cuda:0");
      Tensor xg = x.to(gpu).requires_grad_(), bg = bias.to(gpu).requires_grad_();
      Tensor xc = x.detach().requires_grad_(), bc = bias.detach().requires_grad_();
      Tensor yg = fused(xg, bg), yc = fused(xc, bc);
      expect_close("cuda forward vs cpu", yg, yc, 1e-5);
      qk::sum(yg).backward();
      qk::sum(yc).backward();
      expect_close("cuda dx vs cpu", xg.grad(), xc.grad(), 1e-5);
      expect_close("cuda dbias vs cpu", bg.grad(), bc.grad(), 1e-3);
    } else {
      std::printf("cuda: %s\n", fused.op().has_kernel(qk::DeviceType::cuda)
                                    ? "kernel built; not run (no CUDA backend in this process)"
                                    : "not built (no CUDA compiler)");
    }
  } catch (const qk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }
  std::printf("%s\n", failures == 0 ? "all checks passed" : "SOME CHECKS FAILED");
  return failures == 0 ? 0 : 1;
}

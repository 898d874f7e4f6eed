// Ops defined in the program (define_library): calling them, autograd
// through their backward, the typed wrapper, and each error a user can meet.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/plugin/registry.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace {
using namespace qk;
using V = std::vector<Tensor>;

// x * y + alpha, and its backward: one gradient per argument.
Tensor mul_add_cpu(const Tensor& x, const Tensor& y, double alpha) {
  return ops::binary_scalar(BinaryOp::add, ops::mul(x, y), alpha);
}
V mul_add_backward(const plugin::BackwardContext& ctx) {
  const Tensor& g = ctx.grad(0);
  return {ops::mul(g, ctx.tensor("y")), ops::mul(g, ctx.tensor(0)), Tensor()};
}

void define_mul_add(const std::string& ns) {
  plugin::define_library(ns, [](plugin::Library& lib) {
    lib.def("mul_add(Tensor x, Tensor y, float alpha=1.0) -> Tensor")
        .kernel(DeviceType::cpu, mul_add_cpu)
        .backward(mul_add_backward);
  });
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(Ops, CallRunsTheKernelAndItsBackward) {
  define_mul_add("rt_call");
  Tensor x = randn({3, 4}, DType::f64).requires_grad_();
  Tensor y = randn({3, 4}, DType::f64).requires_grad_();
  Tensor out = plugin::call("rt_call::mul_add", {x, y, 0.5});
  Tensor want = add(mul(x, y), 0.5);
  EXPECT_EQ(out.to_vector<double>(), want.to_vector<double>());
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(out.grad_fn()->name(), "rt_call::mul_add.backward");
  // The default alpha, and the analytic gradient against finite differences.
  EXPECT_EQ(plugin::call("rt_call::mul_add", {x, y}).to_vector<double>(),
            add(mul(x, y), 1.0).to_vector<double>());
  auto r = autograd::gradcheck(
      [](const V& in) { return plugin::call("rt_call::mul_add", {in[0], in[1], 2}).sum(); }, {x, y});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Ops, GradientsFlowOnlyWhereNeeded) {
  define_mul_add("rt_partial");
  Tensor x = randn({5}).requires_grad_();
  Tensor y = randn({5});
  plugin::call("rt_partial::mul_add", {x, y}).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), y.to_vector<float>());
  EXPECT_FALSE(y.grad().defined());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(plugin::call("rt_partial::mul_add", {x, y}).requires_grad());
  }
}

TEST(Ops, TypedWrapperChecksItsSignatureOnce) {
  define_mul_add("rt_typed");
  auto mul_add = plugin::typed<Tensor(const Tensor&, const Tensor&, double)>("rt_typed::mul_add");
  Tensor x = from_vector<float>({1, 2}, {2}), y = from_vector<float>({3, 4}, {2});
  EXPECT_EQ(mul_add(x, y, 1.0).to_vector<float>(), (std::vector<float>{4, 9}));
  std::string e = error_of<TypeError>(
      [] { plugin::typed<Tensor(const Tensor&, double, double)>("rt_typed::mul_add"); });
  EXPECT_NE(e.find("parameter 1 of the typed call is float but argument 'y' of the schema is Tensor"),
            std::string::npos) << e;
  e = error_of<TypeError>([] { plugin::typed<Tensor(const Tensor&, const Tensor&)>("rt_typed::mul_add"); });
  EXPECT_NE(e.find("takes 2 parameter(s) but the schema has 3"), std::string::npos) << e;
}

TEST(Ops, SeveralOutputs) {
  plugin::define_library("rt_multi", [](plugin::Library& lib) {
    lib.def("split(Tensor x) -> (Tensor, Tensor)")
        .kernel(DeviceType::cpu, [](const std::vector<plugin::Value>& a) -> V {
          const Tensor& x = a[0].tensor();
          return {ops::binary_scalar(BinaryOp::mul, x, 2.0), ops::unary(UnaryOp::neg, x)};
        })
        .backward([](const plugin::BackwardContext& ctx) -> V {
          return {ops::sub(ops::binary_scalar(BinaryOp::mul, ctx.grad(0), 2.0), ctx.grad(1))};
        });
  });
  Tensor x = from_vector<double>({1, -2}, {2}).requires_grad_();
  V out = plugin::call_multi("rt_multi::split", {x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].to_vector<double>(), (std::vector<double>{-1, 2}));
  // Only the first output is used: the second gets a zero gradient.
  out[0].sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
  auto [a, b] = plugin::typed<std::tuple<Tensor, Tensor>(const Tensor&)>("rt_multi::split")(x);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{2, -4}));
  std::string e = error_of<ValueError>([&] { plugin::call("rt_multi::split", {x}); });
  EXPECT_NE(e.find("returns 2 tensors; use qk::plugin::call_multi"), std::string::npos) << e;
}

TEST(Ops, AnOpRegisteredTwiceIsRefusedNamingBoth) {
  define_mul_add("rt_twice");
  std::string e = error_of<ValueError>([] {
    plugin::define_library("rt_twice", [](plugin::Library& lib) {
      lib.def("other(Tensor x) -> Tensor").kernel(DeviceType::cpu, [](const std::vector<plugin::Value>& a) -> V {
        return {a[0].tensor()};
      });
      lib.def("mul_add(Tensor x) -> Tensor").kernel(DeviceType::cpu, [](const std::vector<plugin::Value>& a) -> V {
        return {a[0].tensor()};
      });
    }, "second.so");
  });
  EXPECT_NE(e.find("op rt_twice::mul_add is registered twice: by <program> and again by second.so"),
            std::string::npos) << e;
  // All or nothing: the library's other op was not registered either.
  EXPECT_FALSE(plugin::has_op("rt_twice::other"));
  // Twice within one library is refused at def().
  e = error_of<ValueError>([] {
    plugin::define_library("rt_twice_in_one", [](plugin::Library& lib) {
      lib.def("f(Tensor x) -> Tensor");
      lib.def("f(Tensor y) -> Tensor");
    });
  });
  EXPECT_NE(e.find("op rt_twice_in_one::f is defined twice in library rt_twice_in_one"),
            std::string::npos) << e;
}

TEST(Ops, ACallNotMatchingTheSchemaIsATypeError) {
  define_mul_add("rt_mismatch");
  Tensor x = zeros({2});
  std::string e = error_of<TypeError>([&] { plugin::call("rt_mismatch::mul_add", {x}); });
  EXPECT_NE(e.find("rt_mismatch::mul_add: expected 2 to 3 argument(s), got 1; its schema is "
                   "mul_add(Tensor x, Tensor y, float alpha=1.0) -> Tensor"),
            std::string::npos) << e;
  e = error_of<TypeError>([&] { plugin::call("rt_mismatch::mul_add", {x, x, true}); });
  EXPECT_NE(e.find("argument 2 'alpha' must be float, got bool true"), std::string::npos) << e;
  e = error_of<ValueError>([&] { plugin::call("rt_mismatch::nope", {x}); });
  EXPECT_NE(e.find("no op named 'rt_mismatch::nope'; the registered ops are "), std::string::npos) << e;
  EXPECT_NE(e.find("rt_mismatch::mul_add"), std::string::npos) << e;
}

TEST(Ops, ATypedKernelNotMatchingTheSchemaIsRefusedAtRegistration) {
  std::string e = error_of<TypeError>([] {
    plugin::define_library("rt_badkernel", [](plugin::Library& lib) {
      lib.def("mul_add(Tensor x, float y, float alpha) -> Tensor").kernel(DeviceType::cpu, mul_add_cpu);
    });
  });
  EXPECT_NE(e.find("rt_badkernel::mul_add: parameter 1 of the kernel is Tensor but argument 'y' of "
                   "the schema is float"),
            std::string::npos) << e;
  e = error_of<ValueError>([] {
    plugin::define_library("rt_nokernel", [](plugin::Library& lib) { lib.def("f(Tensor x) -> Tensor"); });
  });
  EXPECT_NE(e.find("op rt_nokernel::f (<program>) has no kernel"), std::string::npos) << e;
}

// A second device (host memory under privateuse1) to call an op on.
class ToyBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::privateuse1; }
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "toy"; }
  uint64_t total_memory(int) const override { return 1ull << 30; }
  void* allocate(size_t n, int) override { return std::malloc(n ? n : 1); }
  void deallocate(void* p, size_t, int) override { std::free(p); }
  void copy(void* dst, Device, const void* src, Device, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}
  MemoryStats memory_stats(int) const override { return {}; }
  void reset_peak_memory(int) override {}
};

TEST(Ops, AnOpWithoutAKernelForTheDeviceSaysWhichItHas) {
  static ToyBackend toy;
  register_backend(&toy);
  define_mul_add("rt_device");
  Tensor x = ops::to_device(zeros({2}), Device(DeviceType::privateuse1, 0));
  std::string e = error_of<DeviceError>([&] { plugin::call("rt_device::mul_add", {x, x}); });
  EXPECT_NE(e.find("rt_device::mul_add has no kernel for device privateuse1:0 (it has: cpu)"),
            std::string::npos) << e;
  e = error_of<DeviceError>([&] { plugin::call("rt_device::mul_add", {zeros({2}), x}); });
  EXPECT_NE(e.find("argument 'y' is on privateuse1:0 but 'x' is on cpu"), std::string::npos) << e;
}

TEST(Ops, BrokenKernelsAndBackwardsAreReportedClearly) {
  plugin::define_library("rt_broken", [](plugin::Library& lib) {
    auto two = [](const std::vector<plugin::Value>& a) -> V { return {a[0].tensor().clone(), a[0].tensor().clone()}; };
    auto one = [](const std::vector<plugin::Value>& a) -> V { return {a[0].tensor().clone()}; };
    lib.def("two(Tensor x) -> Tensor").kernel(DeviceType::cpu, two);
    lib.def("no_backward(Tensor x) -> Tensor").kernel(DeviceType::cpu, one);
    lib.def("short_backward(Tensor x, float a) -> Tensor")
        .kernel(DeviceType::cpu, one)
        .backward([](const plugin::BackwardContext& ctx) -> V { return {ctx.grad(0)}; });
    lib.def("wrong_shape(Tensor x) -> Tensor")
        .kernel(DeviceType::cpu, one)
        .backward([](const plugin::BackwardContext&) -> V { return {zeros({7})}; });
  });
  Tensor x = zeros({2}).requires_grad_();
  std::string e = error_of<ValueError>([&] { plugin::call("rt_broken::two", {x}); });
  EXPECT_NE(e.find("the cpu kernel of rt_broken::two returned 2 tensor(s) but the schema declares 1"),
            std::string::npos) << e;
  // Without a backward the forward runs; backward says what to do.
  Tensor y = plugin::call("rt_broken::no_backward", {x});
  e = error_of<ValueError>([&] { y.sum().backward(); });
  EXPECT_NE(e.find("rt_broken::no_backward has no backward"), std::string::npos) << e;
  e = error_of<ValueError>([&] { plugin::call("rt_broken::short_backward", {x, 1.0}).sum().backward(); });
  EXPECT_NE(e.find("returned 1 gradient(s); it must return one per argument (2"), std::string::npos) << e;
  e = error_of<ValueError>([&] { plugin::call("rt_broken::wrong_shape", {x}).sum().backward(); });
  EXPECT_NE(e.find("the gradient of 'x' has shape [7] but the argument has [2]"), std::string::npos) << e;
}

TEST(Ops, KernelsRunWithoutGradModeAndMayReturnAnInput) {
  plugin::define_library("rt_identity", [](plugin::Library& lib) {
    lib.def("identity(Tensor x) -> Tensor")
        .kernel(DeviceType::cpu, [](const std::vector<plugin::Value>& a) -> V {
          QK_CHECK(!autograd::grad_mode_enabled(), "kernel ran with grad mode on");
          return {a[0].tensor()};
        })
        .backward([](const plugin::BackwardContext& ctx) -> V { return {ctx.grad(0)}; });
  });
  Tensor x = from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor y = plugin::call("rt_identity::identity", {x});
  EXPECT_FALSE(y.is_same(x));
  EXPECT_TRUE(x.is_leaf());  // the leaf was not given the op's grad_fn
  ops::mul(y, y);            // raw op: no graph
  mul(y, y).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4}));
}

}  // namespace

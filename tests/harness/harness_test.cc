// The harness itself: its table covers every public op, and each of its
// checks fails when a kernel is wrong (a wrong kernel on a second backend, a
// wrong CPU kernel against f64, a stride bug against the contiguous twin, a
// wrong backward against finite differences), and a missing kernel is listed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "harness/case_builders.h"
#include "harness/case_runner.h"
#include "harness/loopback_backend.h"
#include "harness/op_harness.h"
#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/tensor/kernel_tables.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace {

using namespace qk;
using namespace qk::harness;

Options only(const std::string& filter, std::vector<Device> devices = {}) {
  Options o;
  o.filter = filter;
  o.devices = std::move(devices);
  return o;
}

std::string printed(const Report& r) {
  std::ostringstream os;
  print(os, r);
  return os.str();
}

// ---- the table ----

// The functions the public op headers declare, as the harness names them
// ("ops::softmax" in qk::ops, "softmax" in qk, "operator+").
std::set<std::string> declared_ops() {
  // Every header of qk/tensor/ops (a new one is read without a change
  // here), the random functions and the differentiable functions.
  std::vector<std::string> headers = {"qk/tensor/generator.h", "qk/autograd/functions.h",
                                      "qk/autograd/llm_ops.h"};
  const std::string include = std::string(QK_SOURCE_DIR) + "/include/";
  for (const auto& e : std::filesystem::directory_iterator(include + "qk/tensor/ops"))
    if (e.path().extension() == ".h")
      headers.push_back("qk/tensor/ops/" + e.path().filename().string());
  // A declaration starts at column 0 with its return type (clang-format's
  // layout of these headers): "Tensor softmax(", "inline Tensor add(",
  // "std::pair<Tensor, Tensor> topk(", "Tensor operator+(".
  const std::regex decl(R"(^(?:inline\s+)?[A-Za-z_][\w:<>, ]*?[\s&*]+(operator\S+?|\w+)\()");
  const std::regex open_ns(R"(^namespace ([\w:]+) \{)");
  const std::regex close_ns(R"(^\}\s*// namespace)");
  std::set<std::string> names;
  for (const std::string& h : headers) {
    std::ifstream f(include + h);
    EXPECT_TRUE(f.good()) << h;
    std::vector<std::string> ns;
    std::string line;
    std::smatch m;
    while (std::getline(f, line)) {
      if (std::regex_search(line, m, open_ns)) {
        ns.push_back(m[1]);
        continue;
      }
      if (std::regex_search(line, close_ns)) {
        if (!ns.empty()) ns.pop_back();
        continue;
      }
      if (line.empty() || std::string(" /#}{").find(line[0]) != std::string::npos) continue;
      for (const char* skip :
           {"using", "struct", "class", "enum", "QK_", "template", "extern", "return"})
        if (line.rfind(skip, 0) == 0) line.clear();
      if (!std::regex_search(line, m, decl)) continue;
      std::string scope;
      for (const std::string& n : ns) scope += n + "::";
      const bool in_ops = scope.size() >= 5 && scope.compare(scope.size() - 5, 5, "ops::") == 0;
      names.insert((in_ops ? "ops::" : "") + m[1].str());
    }
  }
  return names;
}

TEST(OpHarness, EveryPublicOpIsListedAndHasACase) {
  const std::set<std::string> declared = declared_ops();
  ASSERT_GT(declared.size(), 150u) << "the header reader found too few declarations";
  const std::set<std::string> listed(public_ops().begin(), public_ops().end());
  for (const std::string& name : declared) {
    EXPECT_TRUE(listed.count(name) || not_ops().count(name))
        << name << " is declared in a public op header but neither in public_ops() nor in "
        << "not_ops() (tests/harness/op_list.cc): add a case for it";
  }
  for (const auto& [name, why] : not_ops())
    EXPECT_TRUE(declared.count(name)) << name << " is in not_ops() but no longer declared";
  std::set<std::string> covered;
  for (const Case& c : all_cases()) {
    covered.insert(c.op);
    covered.insert(c.covers.begin(), c.covers.end());
    EXPECT_TRUE(listed.count(c.op)) << c.id() << ": filed under an op public_ops() does not list";
  }
  for (const std::string& name : listed) EXPECT_TRUE(covered.count(name)) << name << " has no case";
}

TEST(OpHarness, CaseIdsAreUniqueAndTheTableHasTheHardShapes) {
  std::set<std::string> ids;
  int empty = 0, strided = 0, odd = 0, zero_d = 0;
  std::set<DType> dtypes;
  for (const Case& c : all_cases()) {
    EXPECT_TRUE(ids.insert(c.id()).second) << "duplicate case id: " << c.id();
    dtypes.insert(c.dtype);
    for (const Input& in : c.inputs) {
      if (!in.value.defined()) continue;
      if (in.value.numel() == 0) ++empty;
      if (in.view.apply) ++strided;
      if (in.value.dim() == 0) ++zero_d;
      for (int64_t s : in.value.shape()) odd += s == 1031 || s == 13 || s == 7;
    }
  }
  EXPECT_GT(empty, 100);
  EXPECT_GT(strided, 1000);
  EXPECT_GT(odd, 1000);
  EXPECT_GT(zero_d, 10);
  EXPECT_EQ(dtypes.size(), static_cast<size_t>(kNumDTypes));
}

// Every differentiable op meets finite differences at least once (its f64
// cases are not all too large for the gradcheck).
TEST(OpHarness, EveryDifferentiableOpIsGradchecked) {
  std::vector<Case> cases = all_cases();
  std::set<std::string> differentiable;
  for (const Case& c : cases) {
    bool grad = false;
    for (const Input& in : c.inputs) grad = grad || in.grad;
    if (c.dtype == DType::f64 && grad && c.gradcheck) differentiable.insert(c.op);
  }
  Options o;
  o.filter = " f64 ";
  Report r = run(cases, o);
  EXPECT_TRUE(r.ok()) << printed(r);
  for (const std::string& op : differentiable)
    EXPECT_TRUE(r.gradchecked.count(op)) << op << ": no f64 case small enough for the gradcheck";
}

// ---- a second backend ----

TEST(OpHarness, LoopbackBackendMatchesTheCpu) {
  install_loopback();
  Report r = run(
      all_cases(),
      only("^ops::(mm|bmm|linear|conv2d|binary|unary|cast|copy_|fill_|flash_attention_backward) ",
           {kLoopback}));
  ASSERT_EQ(r.backends.size(), 2u);
  const BackendReport& b = r.backends[1];
  EXPECT_EQ(b.device, "privateuse1:0");
  EXPECT_EQ(b.failed, 0) << printed(r);
  EXPECT_EQ(b.missing, 0) << printed(r);
  EXPECT_EQ(b.passed, r.cases);
  EXPECT_GT(r.cases, 700);
}

// The loopback's unary kernel, but exp is off by 1e-3 in its first element.
void slightly_wrong_exp(UnaryOp op, const Tensor& out, const Tensor& a) {
  Tensor r = ops::unary(op, ops::to_device(a, kCPU));
  if (op == UnaryOp::exp && r.numel() > 0)
    ops::add_(ops::slice(ops::view(r, {-1}), 0, 0, 1), full({1}, 1e-3, r.dtype()));
  ops::copy_(out, r);
}

// Pinned host memory and non-blocking copies go through the backend table
// (cudaHostAlloc and cudaMemcpyAsync on the CUDA backend): a pinned source
// or destination takes the backend's asynchronous copy, anything else the
// blocking one, and pinned blocks go back when their tensors do.
TEST(OpHarness, PinnedMemoryAndNonBlockingCopiesTakeTheAsyncPath) {
  install_loopback();
  const LoopbackCounts c0 = loopback_counts();
  Tensor x = arange(0.0, 12.0, 1.0, DType::f32);
  {
    Tensor p = x.pin_memory(DeviceType::privateuse1);
    EXPECT_TRUE(p.is_pinned());
    EXPECT_FALSE(x.is_pinned());
    EXPECT_TRUE(p.device().is_cpu());
    EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(loopback_counts().pinned_blocks, c0.pinned_blocks + 1);
    Tensor d = p.to(kLoopback, true);
    EXPECT_EQ(loopback_counts().async_copies, c0.async_copies + 1) << "pinned source, non-blocking";
    Tensor d2 = x.to(kLoopback, true);
    Tensor d3 = p.to(kLoopback);
    EXPECT_EQ(loopback_counts().async_copies, c0.async_copies + 1) << "pageable source, or blocking asked for";
    Tensor back = d.to(kCPU, true);
    EXPECT_TRUE(back.is_pinned()) << "a non-blocking copy to the host lands in pinned memory";
    EXPECT_EQ(loopback_counts().async_copies, c0.async_copies + 2);
    EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(d2.to(kCPU).to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(d3.to(kCPU).to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(loopback_counts().pinned_blocks, c0.pinned_blocks + 2);
    EXPECT_THROW(d.pin_memory(DeviceType::privateuse1), DeviceError);  // not a CPU tensor
  }
  EXPECT_EQ(loopback_counts().pinned_blocks, c0.pinned_blocks) << "pinned blocks outlived their tensors";
  try {
    x.pin_memory(DeviceType::cpu);  // the CPU backend pins nothing
    ADD_FAILURE() << "pinned by the CPU backend";
  } catch (const DeviceError& e) {
    EXPECT_NE(e.message().find("cannot pin host memory"), std::string::npos) << e.message();
  }
}

TEST(OpHarness, AWrongKernelOnABackendIsAFailure) {
  install_loopback();
  ops::unary_kernel.set(DeviceType::privateuse1, &slightly_wrong_exp);
  Report r = run(all_cases(), only("^ops::unary f32 (exp|tanh) \\[7,13\\]$", {kLoopback}));
  install_loopback();
  ASSERT_EQ(r.cases, 2);
  EXPECT_EQ(r.backends[0].failed, 0) << printed(r);  // the CPU is right
  const BackendReport& b = r.backends[1];
  EXPECT_EQ(b.passed, 1);  // tanh
  ASSERT_EQ(b.failed, 1) << printed(r);
  EXPECT_EQ(b.failures[0].case_id, "ops::unary f32 exp [7,13]");
  EXPECT_EQ(b.failures[0].check, "backend");
  EXPECT_NE(b.failures[0].detail.find("output 0: 1 of 91 elements off; worst at [0, 0]"),
            std::string::npos)
      << b.failures[0].detail;
  EXPECT_FALSE(r.ok());
  EXPECT_NE(printed(r).find("FAILED [privateuse1:0] ops::unary f32 exp [7,13] (backend)"),
            std::string::npos);
}

// A backward kernel whose weight gradient is scaled: only the gradient
// comparison can see it.
std::tuple<Tensor, Tensor, Tensor> wrong_dw(const Tensor& g, const Tensor& x, const Tensor& w,
                                            const Conv2dParams& p, bool dx, bool dw, bool db) {
  auto cpu = ops::conv2d_bwd_kernel.get(kCPU);
  auto host = [](const Tensor& t) { return ops::to_device(t, kCPU); };
  auto [gx, gw, gb] = cpu(host(g), host(x), host(w), p, dx, dw, db);
  auto dev = [&](const Tensor& t) { return t.defined() ? ops::to_device(t, x.device()) : t; };
  return {dev(gx), gw.defined() ? dev(ops::binary_scalar(BinaryOp::mul, gw, 1.01)) : gw, dev(gb)};
}

TEST(OpHarness, GradientsAreComparedAcrossBackends) {
  install_loopback();
  ops::conv2d_bwd_kernel.set(DeviceType::privateuse1, &wrong_dw);
  Report r = run(all_cases(), only("^conv2d f32 x\\[2,3,7,7\\] w\\[4,3,3,3\\] bias ", {kLoopback}));
  install_loopback();
  ASSERT_EQ(r.cases, 1);
  const BackendReport& b = r.backends[1];
  ASSERT_EQ(b.failed, 1) << printed(r);
  EXPECT_EQ(b.failures[0].detail.rfind("gradient of input 1:", 0), 0u) << b.failures[0].detail;
  // Forward only, the same kernel passes.
  Options o = only("^conv2d f32 x\\[2,3,7,7\\] w\\[4,3,3,3\\] bias ", {kLoopback});
  o.gradients = false;
  ops::conv2d_bwd_kernel.set(DeviceType::privateuse1, &wrong_dw);
  EXPECT_TRUE(run(all_cases(), o).ok());
  install_loopback();
}

TEST(OpHarness, AMissingKernelIsListedNotSkipped) {
  install_loopback();
  ops::binary_kernel.set(DeviceType::privateuse1, nullptr);
  Report r =
      run(all_cases(), only("^ops::binary (f32|i32) add \\[7,13\\]\\+\\[13\\]$", {kLoopback}));
  install_loopback();
  ASSERT_EQ(r.cases, 2);
  const BackendReport& b = r.backends[1];
  EXPECT_EQ(b.missing, r.cases);
  EXPECT_EQ(b.passed, 0);
  EXPECT_EQ(b.failed, 0);
  EXPECT_TRUE(r.ok());  // missing is not failing: it is listed
  EXPECT_TRUE(b.missing_ops.count({"ops::binary", DType::f32, "binary_kernel"}));
  EXPECT_TRUE(b.missing_ops.count({"ops::binary", DType::i32, "binary_kernel"}));
  const std::string text = printed(r);
  EXPECT_NE(
      text.find(qk::detail::str_cat("privateuse1:0: 0 passed, 0 failed, ", r.cases, " missing")),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("missing on privateuse1:0 (op: dtypes; kernel):\n  ops::binary: f32,i32; "
                      "binary_kernel\n"),
            std::string::npos)
      << text;
}

void throwing_fill(const Tensor&, double) { throw std::runtime_error("device lost"); }

TEST(OpHarness, ABackendThatThrowsIsAFailure) {
  install_loopback();
  ops::fill_kernel.set(DeviceType::privateuse1, &throwing_fill);
  Report r = run(all_cases(), only("^ops::fill_ f32 ", {kLoopback}));
  install_loopback();
  ASSERT_EQ(r.cases, 1);
  ASSERT_EQ(r.backends[1].failed, 1);
  EXPECT_EQ(r.backends[1].failures[0].check, "raised");
  EXPECT_EQ(r.backends[1].failures[0].detail, "device lost");
}

// ---- the CPU's own checks ----

ops::UnaryFn* cpu_unary = nullptr;  // the real CPU kernel, while a test replaces it

void exp_wrong_in_f32(UnaryOp op, const Tensor& out, const Tensor& a) {
  cpu_unary(op, out, a);
  if (op == UnaryOp::exp && out.dtype() == DType::f32 && out.numel() > 0)
    ops::mul_(ops::slice(ops::view(out, {-1}), 0, 0, 1), 1.001);
}

TEST(OpHarness, TheF64ReferenceCatchesAWrongCpuKernel) {
  cpu_unary = ops::unary_kernel.get(kCPU);
  ops::unary_kernel.set(DeviceType::cpu, &exp_wrong_in_f32);
  Report r = run(all_cases(), only("^ops::unary (f32|f64) exp \\[7,13\\]$"));
  ops::unary_kernel.set(DeviceType::cpu, cpu_unary);
  ASSERT_EQ(r.cases, 2);
  ASSERT_EQ(r.backends[0].failed, 1) << printed(r);
  EXPECT_EQ(r.backends[0].failures[0].case_id, "ops::unary f32 exp [7,13]");
  EXPECT_EQ(r.backends[0].failures[0].check, "reference");
}

void exp_wrong_when_strided(UnaryOp op, const Tensor& out, const Tensor& a) {
  cpu_unary(op, out, a);
  if (op == UnaryOp::exp && !a.is_contiguous() && out.numel() > 0)
    ops::mul_(ops::slice(ops::view(out, {-1}), 0, 0, 1), 1.001);
}

TEST(OpHarness, TheContiguousTwinCatchesAStrideBug) {
  cpu_unary = ops::unary_kernel.get(kCPU);
  ops::unary_kernel.set(DeviceType::cpu, &exp_wrong_when_strided);
  Report r = run(all_cases(), only("^ops::unary f64 exp \\[7,13\\](T|slice)?$"));
  ops::unary_kernel.set(DeviceType::cpu, cpu_unary);
  ASSERT_EQ(r.cases, 3);
  ASSERT_EQ(r.backends[0].failed, 2) << printed(r);
  for (const Failure& f : r.backends[0].failures) EXPECT_EQ(f.check, "layout") << f.case_id;
}

// y = 3x with a backward that says 2: the same formula in f64 agrees with
// itself, so only finite differences see it.
TEST(OpHarness, FiniteDifferencesCatchAWrongBackward) {
  std::vector<Case> cases;
  for (DType t : {DType::f32, DType::f64}) {
    Case c;
    c.op = "wrong";
    c.dtype = t;
    c.inputs = {data(ops::cast(from_vector<double>({0.5, -1, 2}, {3}), t))};
    c.fn = [](const std::vector<Tensor>& a) {
      Tensor y = ops::binary_scalar(BinaryOp::mul, a[0], 3);
      autograd::record("WrongBackward", {a[0]}, {y}, [](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{ops::binary_scalar(BinaryOp::mul, g[0], 2)};
      });
      return std::vector<Tensor>{y};
    };
    cases.push_back(c);
  }
  Report r = run(cases, Options{});
  ASSERT_EQ(r.backends[0].failed, 1) << printed(r);
  EXPECT_EQ(r.backends[0].failures[0].case_id, "wrong f64");
  EXPECT_EQ(r.backends[0].failures[0].check, "gradcheck");
  EXPECT_EQ(r.gradchecked, std::set<std::string>{"wrong"});
}

// ---- comparisons ----

TEST(OpHarness, ComparisonRules) {
  auto f64 = [](std::vector<double> v) {
    return from_vector<double>(v, {static_cast<int64_t>(v.size())});
  };
  const Tolerance tol{1e-3, 1e-3};
  EXPECT_EQ(compare(f64({1, NAN, INFINITY}), f64({1, NAN, INFINITY}), tol, true).mismatch, "");
  EXPECT_NE(compare(f64({1, 2}), f64({1, NAN}), tol, true).mismatch, "");
  EXPECT_NE(compare(f64({1, -INFINITY}), f64({1, INFINITY}), tol, true).mismatch, "");
  // The absolute part scales with the largest magnitude: 0.5 off 1000 passes, 0.5 off 1 fails.
  EXPECT_EQ(compare(f64({1000, 0.5}), f64({1000, 0}), tol, true).mismatch, "");
  EXPECT_NE(compare(f64({1, 0.5}), f64({1, 0}), tol, true).mismatch, "");
  // Integers are exact; shapes and (when asked) dtypes must match.
  Tensor i = from_vector<int32_t>({1, 2}, {2});
  EXPECT_NE(compare(from_vector<int32_t>({1, 3}, {2}), i, {1, 1}, true).mismatch, "");
  EXPECT_NE(compare(f64({1, 2}), i, tol, true).mismatch, "");
  EXPECT_EQ(compare(f64({1, 2}), i, tol, false).mismatch, "");
  EXPECT_NE(compare(f64({1, 2}), from_vector<double>({1, 2}, {2, 1}), tol, true).mismatch, "");
  Comparison c = compare(f64({1.0005}), f64({1}), tol, true);
  EXPECT_EQ(c.mismatch, "");
  EXPECT_NEAR(c.used, 0.0005 / 2e-3, 1e-6);
}

}  // namespace

#include "harness/case_runner.h"

#include <cmath>
#include <sstream>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

namespace {

// FNV-1a: cotangents must be the same on every device and every machine.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// The gradient fed into output i: values in [-1, 1), rounded to the case's
// dtype first, so the low-precision run and its f64 reference start from the
// same numbers.
Tensor cotangent(const Case& c, size_t i, const Tensor& out) {
  Generator g(fnv1a(c.id()) + i);
  Tensor v = ops::binary_scalar(
      BinaryOp::sub, ops::binary_scalar(BinaryOp::mul, rand(out.shape(), DType::f64, g), 2.0), 1.0);
  if (is_floating(c.dtype)) v = ops::cast(v, c.dtype);
  return ops::to_device(ops::cast(v, out.dtype()), out.device());
}

Tensor to_cpu(const Tensor& t) { return t.defined() ? ops::to_device(t.detach(), kCPU) : t; }

// "'unary_kernel' is not implemented for device cuda:0" -> "unary_kernel".
std::string kernel_named_in(const std::string& message) {
  const size_t a = message.find('\'');
  const size_t b = a == std::string::npos ? a : message.find('\'', a + 1);
  return b == std::string::npos ? message : message.substr(a + 1, b - a - 1);
}

std::string index_str(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

}  // namespace

Tolerance scaled(Tolerance t, double k) { return {t.atol * k, t.rtol * k}; }

RunResult run_case(const Case& c, const RunOptions& o) {
  RunResult r;
  try {
    std::vector<Tensor> leaves, args;
    std::vector<size_t> with_grad;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const Input& in = c.inputs[k];
      Tensor v = in.value;
      if (v.defined()) {
        if (o.f64 && in.to_f64 && v.dtype() != DType::f64 && v.dtype() != DType::boolean)
          v = ops::cast(v, DType::f64);
        // A fresh copy per run: ops that write their inputs (running stats,
        // in-place ops) must not change the next run's.
        v = o.device.is_cpu() ? ops::clone(v) : ops::to_device(v, o.device);
        if (o.gradients && in.grad && is_floating(v.dtype())) {
          v.requires_grad_();
          with_grad.push_back(k);
        }
      }
      Tensor a = v.defined() && in.view.apply ? in.view.apply(v) : v;
      if (o.contiguous && a.defined()) a = a.contiguous();
      leaves.push_back(v);
      args.push_back(a);
    }
    const OpFn& fn = o.f64 && c.reference ? c.reference : c.fn;
    std::vector<Tensor> outs;
    if (with_grad.empty()) {
      NoGradGuard no_grad;
      outs = fn(args);
    } else {
      EnableGradGuard grad_on;
      outs = fn(args);
    }
    r.grads.assign(with_grad.size(), Tensor());
    r.grad_inputs = with_grad;
    std::vector<Tensor> roots, seeds, wrt;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].defined() && outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        seeds.push_back(cotangent(c, i, outs[i]));
      }
    }
    for (size_t k : with_grad) wrt.push_back(leaves[k]);
    if (!roots.empty() && !wrt.empty()) {
      std::vector<Tensor> g = autograd::grad(roots, wrt, seeds);
      for (size_t j = 0; j < g.size(); ++j) r.grads[j] = to_cpu(g[j]);
    }
    for (const Tensor& t : outs) r.outputs.push_back(to_cpu(t));
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    r.missing = m.find("is not implemented for device") != std::string::npos;
    r.error = r.missing ? kernel_named_in(m) : m;
  } catch (const TypeError& e) {
    // A backend that refuses a dtype the CPU takes lacks that kernel.
    r.missing = !o.device.is_cpu();
    r.error = r.missing ? detail::str_cat("dtype refused: ", e.what()) : e.what();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

Comparison compare(const Tensor& got, const Tensor& want, Tolerance tol, bool check_dtype) {
  if (got.defined() != want.defined())
    return {got.defined() ? "defined, the reference is undefined"
                          : "undefined, the reference is not"};
  if (!got.defined()) return {};
  if (got.shape() != want.shape())
    return {detail::str_cat("shape ", shape_str(got.shape()), ", want ", shape_str(want.shape()))};
  if (check_dtype && got.dtype() != want.dtype())
    return {
        detail::str_cat("dtype ", dtype_name(got.dtype()), ", want ", dtype_name(want.dtype()))};
  const bool exact = !is_floating(got.dtype()) || !is_floating(want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 1;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0, used = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double ratio;
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
      ratio = same ? 0 : INFINITY;
    } else {
      const double err = std::fabs(g[i] - w[i]);
      const double bound = exact ? 0 : tol.atol * scale + tol.rtol * std::fabs(w[i]);
      if (bound > 0 && err <= bound) used = std::max(used, err / bound);
      ratio = std::isnan(err) ? INFINITY : err <= bound ? 0 : bound > 0 ? err / bound : INFINITY;
    }
    if (ratio > 0) {
      ++bad;
      if (worst < 0 || ratio > worst_ratio) {
        worst = static_cast<int64_t>(i);
        worst_ratio = ratio;
      }
    }
  }
  if (bad == 0) return {"", used};
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << w.size() << " elements off; worst at " << index_str(worst, want.shape())
     << ": " << g[worst] << " vs " << w[worst];
  if (!exact)
    os << " (|diff| " << std::fabs(g[worst] - w[worst]) << ", allowed "
       << tol.atol * scale + tol.rtol * std::fabs(w[worst]) << ")";
  return {os.str(), worst_ratio};
}

Comparison compare_runs(const RunResult& got, const RunResult& want, Tolerance out_tol,
                        Tolerance grad_tol, bool check_dtype) {
  if (got.outputs.size() != want.outputs.size())
    return {detail::str_cat(got.outputs.size(), " outputs, want ", want.outputs.size())};
  double used = 0;
  for (size_t i = 0; i < got.outputs.size(); ++i) {
    Comparison c = compare(got.outputs[i], want.outputs[i], out_tol, check_dtype);
    if (!c.mismatch.empty()) return {detail::str_cat("output ", i, ": ", c.mismatch), c.used};
    used = std::max(used, c.used);
  }
  if (got.grads.size() != want.grads.size())
    return {detail::str_cat(got.grads.size(), " gradients, want ", want.grads.size())};
  for (size_t k = 0; k < got.grads.size(); ++k) {
    Comparison c = compare(got.grads[k], want.grads[k], grad_tol, check_dtype);
    if (!c.mismatch.empty())
      return {detail::str_cat("gradient of input ", got.grad_inputs[k], ": ", c.mismatch), c.used};
    used = std::max(used, c.used);
  }
  return {"", used};
}

}  // namespace qk::harness

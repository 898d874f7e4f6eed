// run(): every case on the CPU (with its self-checks), then on each other
// backend against the CPU; print(): the report.
#include <algorithm>
#include <regex>

#include "harness/case_runner.h"
#include "harness/op_harness.h"
#include "qk/autograd/functions.h"
#include "qk/autograd/gradcheck.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/ops/view.h"

namespace qk::harness {

// Note [Tolerances]: against another backend, a result may differ by the
// order of its sums (a GPU reduces in a tree) and by a rounding of the final
// low-precision value (1 ulp of bf16 is 2^-8 relative). Against f64, the
// error of the op in its own dtype counts too; f16/bf16 kernels compute in
// f32 and round once, so a few half-ulps suffice.
Tolerance backend_tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-10, 1e-10};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {1e-3, 2e-3};
    case DType::bf16:
      return {1e-2, 1.6e-2};
    default:
      return {0, 0};
  }
}

Tolerance reference_tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-10, 1e-10};
    case DType::f32:
      return {2e-6, 2e-5};
    case DType::f16:
      return {2e-3, 4e-3};
    case DType::bf16:
      return {1.6e-2, 3.2e-2};
    default:
      return {0, 0};
  }
}

std::string Case::id() const {
  return shape.empty() ? detail::str_cat(op, " ", dtype_name(dtype))
                       : detail::str_cat(op, " ", dtype_name(dtype), " ", shape);
}

bool Report::ok() const {
  for (const auto& b : backends)
    if (b.failed > 0) return false;
  return true;
}

std::vector<Device> registered_devices() {
  std::vector<Device> out;
  for (DeviceType t : {DeviceType::cuda, DeviceType::privateuse1})
    if (has_backend(t) && backend(t).device_count() > 0) out.emplace_back(t, 0);
  return out;
}

namespace {

bool has_view(const Case& c) {
  return std::any_of(c.inputs.begin(), c.inputs.end(),
                     [](const Input& in) { return in.value.defined() && in.view.apply; });
}

// Finite differences of sum_i <out_i, cot_i> w.r.t. the inputs with grad,
// on the f64 case; "skip" when it has none or they are too large.
std::string finite_difference_check(const Case& c, const Options& o) {
  std::vector<Tensor> leaves;
  int64_t numel = 0;
  for (const Input& in : c.inputs) {
    Tensor v = in.value.defined() ? ops::clone(in.value) : in.value;
    if (in.grad && v.defined() && is_floating(v.dtype())) {
      v.requires_grad_();
      numel += v.numel();
    }
    leaves.push_back(v);
  }
  if (numel == 0 || numel > o.gradcheck_max_numel) return "skip";
  // The differentiable outputs, found once in grad mode (gradcheck evaluates
  // the numeric side without it).
  std::vector<size_t> diff;
  std::vector<Tensor> cots;
  {
    EnableGradGuard on;
    std::vector<Tensor> args;
    for (size_t k = 0; k < leaves.size(); ++k)
      args.push_back(leaves[k].defined() && c.inputs[k].view.apply
                         ? c.inputs[k].view.apply(leaves[k])
                         : leaves[k]);
    std::vector<Tensor> outs = c.fn(args);
    Generator g(0x9e3779b9);
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].defined() && outs[i].requires_grad()) {
        diff.push_back(i);
        cots.push_back(rand(outs[i].shape(), DType::f64, g));
      }
    }
  }
  if (diff.empty()) return "skip";
  auto f = [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> args;
    for (size_t k = 0; k < in.size(); ++k)
      args.push_back(in[k].defined() && c.inputs[k].view.apply ? c.inputs[k].view.apply(in[k])
                                                               : in[k]);
    std::vector<Tensor> outs = c.fn(args);
    Tensor total = zeros({}, DType::f64);
    for (size_t j = 0; j < diff.size(); ++j)
      total = add(total, sum(mul(outs[diff[j]].to(DType::f64), cots[j])));
    return total;
  };
  // eps 1e-5: the rounding noise of a difference of two sums over ~2000
  // outputs is ~ulp(f) / eps, 1e-6 at eps 1e-6 (as large as atol); the
  // truncation error, eps^2 f''', stays far below it.
  autograd::GradcheckResult g =
      autograd::gradcheck(f, leaves, 1e-5, 1e-6 * c.tol_scale, 1e-4 * c.tol_scale);
  return g.ok ? "" : g.message;
}

void fail(BackendReport& b, const Case& c, const std::string& check, const std::string& detail,
          bool& ok) {
  b.failures.push_back({c.id(), check, detail});
  ok = false;
}

// A comparison's outcome: a failure, or how close a pass came.
void judge(BackendReport& b, const Case& c, const std::string& check, const Comparison& cmp,
           const std::string& what, bool& ok) {
  if (!cmp.mismatch.empty()) {
    fail(b, c, check, what.empty() ? cmp.mismatch : detail::str_cat(what, cmp.mismatch), ok);
    return;
  }
  auto& closest = b.closest[detail::str_cat(check, " ", dtype_name(c.dtype))];
  if (cmp.used > closest.first) closest = {cmp.used, c.id()};
}

void cpu_checks(const Case& c, const RunResult& base, const Options& o, BackendReport& b,
                std::set<std::string>& gradchecked, bool& ok) {
  const double out_k = c.tol_scale, grad_k = c.tol_scale * c.grad_tol_scale;
  // An f64 case meets its reference too when that is another computation
  // (the unfused composition, the host Philox stream).
  if (c.f64_reference && (c.dtype != DType::f64 || c.reference) && c.dtype != DType::boolean) {
    ++b.checks["reference"];
    RunOptions ro;
    ro.f64 = true;
    ro.gradients = o.gradients;
    RunResult ref = run_case(c, ro);
    if (!ref.ok()) {
      fail(b, c, "reference", detail::str_cat("the f64 recomputation raised: ", ref.error), ok);
    } else {
      Tolerance t = reference_tolerance(c.dtype);
      judge(b, c, "reference", compare_runs(base, ref, scaled(t, out_k), scaled(t, grad_k), false),
            "", ok);
    }
  }
  if (has_view(c)) {
    ++b.checks["layout"];
    RunOptions ro;
    ro.contiguous = true;
    ro.gradients = o.gradients;
    RunResult twin = run_case(c, ro);
    if (!twin.ok()) {
      fail(b, c, "layout", detail::str_cat("the contiguous twin raised: ", twin.error), ok);
    } else {
      Tolerance t = backend_tolerance(c.dtype);
      judge(b, c, "layout", compare_runs(base, twin, scaled(t, out_k), scaled(t, grad_k), true),
            "strided vs contiguous inputs: ", ok);
    }
  }
  if (o.gradcheck && o.gradients && c.gradcheck && c.dtype == DType::f64) {
    std::string d;
    try {
      d = finite_difference_check(c, o);
    } catch (const std::exception& e) {
      d = detail::str_cat("raised: ", e.what());
    }
    if (d != "skip") {
      ++b.checks["gradcheck"];
      gradchecked.insert(c.op);
      if (!d.empty()) fail(b, c, "gradcheck", d, ok);
    }
  }
}

}  // namespace

Report run(const std::vector<Case>& cases, const Options& o) {
  Report rep;
  const std::vector<Device> devices = o.devices.empty() ? registered_devices() : o.devices;
  rep.backends.emplace_back().device = "cpu";
  for (const Device& d : devices) rep.backends.emplace_back().device = d.str();
  std::regex filter(o.filter.empty() ? ".*" : o.filter);
  std::set<std::string> covered;
  for (const Case& c : cases) {
    covered.insert(c.op);
    covered.insert(c.covers.begin(), c.covers.end());
    if (!o.filter.empty() && !std::regex_search(c.id(), filter)) continue;
    ++rep.cases;
    if (o.verbose && o.log) *o.log << c.id() << "\n" << std::flush;
    RunOptions ro;
    ro.gradients = o.gradients;
    RunResult base = run_case(c, ro);
    BackendReport& cpu = rep.backends[0];
    bool ok = true;
    if (base.missing) {
      ++cpu.missing;
      cpu.missing_ops.insert({c.op, c.dtype, base.error});
    } else if (!base.ok()) {
      fail(cpu, c, "raised", base.error, ok);
    } else if (o.cpu_checks) {
      cpu_checks(c, base, o, cpu, rep.gradchecked, ok);
    }
    if (!base.missing) ++(ok ? cpu.passed : cpu.failed);
    for (size_t i = 0; i < devices.size(); ++i) {
      BackendReport& b = rep.backends[i + 1];
      ++b.checks["backend"];
      RunOptions dro = ro;
      dro.device = devices[i];
      RunResult got = run_case(c, dro);
      bool dok = true;
      if (got.missing) {
        ++b.missing;
        b.missing_ops.insert({c.op, c.dtype, got.error});
        continue;
      }
      if (!got.ok()) {
        fail(b, c, "raised", got.error, dok);
      } else if (!base.ok()) {
        fail(b, c, "backend", detail::str_cat("no CPU result to compare with: ", base.error), dok);
      } else {
        const Tolerance t = scaled(backend_tolerance(c.dtype), c.tol_scale);
        judge(b, c, "backend", compare_runs(got, base, t, scaled(t, c.grad_tol_scale), true), "",
              dok);
      }
      ++(dok ? b.passed : b.failed);
    }
  }
  for (const std::string& name : public_ops())
    (covered.count(name) ? rep.covered_ops : rep.uncovered_ops).push_back(name);
  return rep;
}

void print(std::ostream& os, const Report& r, bool list_failures) {
  os << "op harness: " << r.cases << " cases\n";
  for (const BackendReport& b : r.backends) {
    os << "  " << b.device << ": " << b.passed << " passed, " << b.failed << " failed, "
       << b.missing << " missing";
    const char* sep = " (checks:";
    for (const auto& [name, n] : b.checks) {
      os << sep << " " << name << " " << n;
      sep = ",";
    }
    os << (b.checks.empty() ? "" : ")") << "\n";
    for (const auto& [check, closest] : b.closest) {
      if (closest.second.empty()) continue;
      os << "    closest " << check << " pass: " << closest.first << " of its tolerance ("
         << closest.second << ")\n";
    }
  }
  for (const BackendReport& b : r.backends) {
    if (list_failures) {
      for (const Failure& f : b.failures)
        os << "FAILED [" << b.device << "] " << f.case_id << " (" << f.check << "): " << f.detail
           << "\n";
    }
    if (!b.missing_ops.empty()) {
      // One line per op and kernel, with the dtypes it lacks.
      os << "missing on " << b.device << " (op: dtypes; kernel):\n";
      std::map<std::pair<std::string, std::string>, std::string> rows;
      for (const Missing& m : b.missing_ops) {
        std::string& dts = rows[{m.op, m.why}];
        if (dts.find(dtype_name(m.dtype)) != std::string::npos) continue;
        if (!dts.empty()) dts += ",";
        dts += dtype_name(m.dtype);
      }
      for (const auto& [key, dts] : rows)
        os << "  " << key.first << ": " << dts << "; " << key.second << "\n";
    }
  }
  const size_t total = r.covered_ops.size() + r.uncovered_ops.size();
  os << "op coverage: " << r.covered_ops.size() << " of " << total << " public ops have cases\n";
  for (const std::string& name : r.uncovered_ops) os << "  no case: " << name << "\n";
  os << (r.ok() ? "OK" : "FAILED") << "\n";
}

}  // namespace qk::harness

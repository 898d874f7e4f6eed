// The op harness: one table of op cases (every public op of qk/tensor and the
// differentiable ops of qk/autograd, x dtypes x shapes, including empty, odd
// and non-contiguous inputs), run on every registered backend and compared
// with the CPU backend, gradients too, as ggml's test-backend-ops does.
//
//   qk::harness::Options o;                       // every case, every backend
//   qk::harness::Report r = qk::harness::run(qk::harness::all_cases(), o);
//   qk::harness::print(std::cout, r);             // passed/failed/missing per backend
//   return r.ok() ? 0 : 1;
//
// The CPU backend is checked against itself in ways that need no second
// device: each low-precision case against the same op recomputed in f64,
// each non-contiguous case against its contiguous twin, and the f64 cases'
// gradients against finite differences (qk/autograd/gradcheck.h). Every
// other backend is checked against the CPU: forward outputs and input
// gradients, within per-dtype tolerances. An op a backend has no kernel for
// is listed as missing (op x dtype), never skipped silently. docs/op_harness.md
// says how to run it and how to read the report.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "qk/tensor/tensor.h"

namespace qk::harness {

// |got - want| <= atol * max(1, max|want|) + rtol * |want|, elementwise: the
// absolute part scales with the tensor's magnitude, so a sum of a thousand
// values is judged like its terms. NaN must meet NaN, inf the same inf.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
// One backend against another (the same op, the same dtype).
Tolerance backend_tolerance(DType t);
// A t result against the same op run in f64.
Tolerance reference_tolerance(DType t);

// How an input reaches the op: the view taken of the value on each device
// (transposed, sliced, expanded...), so that kernels see strided memory.
struct View {
  std::string label;                           // "", "T", "slice", "expand": shown in the case's id
  std::function<Tensor(const Tensor&)> apply;  // differentiable (Tensor methods)
};

struct Input {
  Tensor value;       // on the CPU; the same values go to every device
  View view;          // empty: the value as is
  bool grad = false;  // differentiate w.r.t. value (floating values only)
  // Cast to f64 for the reference run. Off for indices, and for inputs whose
  // dtype the op fixes (rotary's f32 cos/sin with a bf16 x).
  bool to_f64 = true;
};

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& args)>;

struct Case {
  std::string op;                   // the public op it is filed under: "softmax", "ops::mm"
  std::vector<std::string> covers;  // further public ops it exercises ("ops::softmax_backward")
  std::string shape;                // what the inputs are: "[7,13] dim=0"
  DType dtype = DType::f32;         // the dtype the case is about
  std::vector<Input> inputs;
  OpFn fn;
  // The recomputation in f64 that low-precision results are held to. Empty:
  // fn itself on the inputs cast to f64. A case whose op has no f64 kernel
  // (flash attention) gives the unfused composition here.
  OpFn reference;
  bool f64_reference = true;  // false where f64 is not the same op (u8 wraparound)
  bool gradcheck = true;      // finite differences on the f64 case (small inputs only)
  double tol_scale = 1;       // widens every tolerance of this case (ops that round often)
  double grad_tol_scale = 2;  // further widening for gradients (a backward rounds again)

  std::string id() const;  // "softmax f32 [7,13] dim=0"
};

// The table: cases_*.cc. Built anew on each call (inputs are fresh tensors).
std::vector<Case> all_cases();

// The public ops the harness must cover (op_list.cc), and the names in the
// public headers that are not ops (shape helpers, kernel variants); a test
// checks both against the headers.
const std::vector<std::string>& public_ops();
const std::map<std::string, std::string>& not_ops();  // name -> why

struct Options {
  std::string filter;      // regex on Case::id(); empty: all
  bool cpu_checks = true;  // reference, layout and gradcheck on the CPU
  bool gradients = true;   // compare input gradients too
  bool gradcheck = true;   // finite differences on the small f64 cases
  int64_t gradcheck_max_numel = 2100;
  // Non-CPU devices to compare with the CPU; empty: one of each registered type.
  std::vector<Device> devices;
  bool verbose = false;         // print each case as it runs
  std::ostream* log = nullptr;  // where verbose goes
};

struct Failure {
  std::string case_id;
  std::string check;   // "reference", "layout", "gradcheck", "backend", "raised"
  std::string detail;  // which output or gradient, where, how far off
};

struct Missing {
  std::string op;
  DType dtype;
  std::string why;  // the kernel table named by the error, or the error
  bool operator<(const Missing& o) const {
    return std::tie(op, dtype, why) < std::tie(o.op, o.dtype, o.why);
  }
};

struct BackendReport {
  std::string device;  // "cpu", "cuda:0", ...
  int passed = 0;      // cases whose every check passed
  int failed = 0;
  int missing = 0;                    // cases that could not run for want of a kernel
  std::map<std::string, int> checks;  // check name -> how many were made
  // "check dtype" -> the passing case that came closest to its tolerance, and
  // how close (largest |diff| / allowed): a tolerance far looser than the
  // kernels need shows here.
  std::map<std::string, std::pair<double, std::string>> closest;
  std::vector<Failure> failures;
  std::set<Missing> missing_ops;
};

struct Report {
  int cases = 0;
  std::vector<BackendReport> backends;     // the CPU first
  std::vector<std::string> covered_ops;    // public ops with at least one case
  std::vector<std::string> uncovered_ops;  // public ops with none
  std::set<std::string> gradchecked;       // ops checked against finite differences
  bool ok() const;  // no failure on any backend (missing ops are not failures)
};

Report run(const std::vector<Case>& cases, const Options& o = {});
// The summary: per backend passed/failed/missing, each failure, the missing
// ops (op x dtype), and the op coverage.
void print(std::ostream& os, const Report& r, bool list_failures = true);

// The non-CPU devices with a registered backend (one device of each type).
std::vector<Device> registered_devices();

}  // namespace qk::harness

// Running one case on one device, and comparing two runs: the pieces
// run() (harness.cc) is made of.
#pragma once

#include <string>
#include <vector>

#include "harness/op_harness.h"

namespace qk::harness {

struct RunOptions {
  Device device = kCPU;
  bool f64 = false;         // inputs (those with to_f64) cast to f64; the reference fn
  bool contiguous = false;  // each view made contiguous before the op
  bool gradients = true;
};

struct RunResult {
  std::vector<Tensor> outputs;      // on the CPU, detached
  std::vector<Tensor> grads;        // per input with grad (undefined: none flowed), on the CPU
  std::vector<size_t> grad_inputs;  // the index in Case::inputs of each of grads
  bool missing = false;             // the device has no kernel for the op (or the dtype)
  std::string error;                // what the run threw (the kernel table, when missing)
  bool ok() const { return !missing && error.empty(); }
};

RunResult run_case(const Case& c, const RunOptions& o);

struct Comparison {
  std::string mismatch;  // "" when within tolerance, else what differs and where
  double used = 0;       // the largest |diff| / allowed over the elements: how close it came
};

// `got` against `want` within `tol`. Integer and bool values must be equal.
// check_dtype: the dtypes must match too (off against an f64 reference).
Comparison compare(const Tensor& got, const Tensor& want, Tolerance tol, bool check_dtype);

// Both runs' outputs and gradients, each compared; the first mismatch names
// the output or gradient.
Comparison compare_runs(const RunResult& got, const RunResult& want, Tolerance out_tol,
                        Tolerance grad_tol, bool check_dtype);

Tolerance scaled(Tolerance t, double k);

}  // namespace qk::harness

// Conjugate gradients (HPCG's CG / CG_ref) and the reference's validation
// tests (TestCG, TestSymmetry), over either kernel set.
#pragma once

#include <vector>

#include "hpcg/kernels.h"

namespace qk::hpc::hpcg {

struct CgResult {
  int iters = 0;
  double normr = 0, normr0 = 0;
};

// Solves A x = b from the given x; stops after max_iters or when
// ||r|| / ||r0|| <= tolerance. Appends ||r_k|| / ||r_0|| to `history` if set.
CgResult cg(Level& a, Kernels& k, const std::vector<double>& b, std::vector<double>& x,
            int max_iters, double tolerance, bool precondition,
            std::vector<double>* history = nullptr);

struct CgTest {
  int unprec_iters = 0, prec_iters = 0;  // worst of the calls
  bool passed = false;                   // <= 12 and <= 2, as in the reference
};
// The diagonal is scaled up (by 1e6, rows 0..8 of the global matrix more), so
// CG converges in about 10 iterations unpreconditioned and 1 with MG.
CgTest test_cg(Level& a, Kernels& k, const std::vector<double>& b);

struct SymmetryTest {
  double spmv = 0, mg = 0;  // |x'Ay - y'Ax| / ((|x| |A| |y| + |y| |A| |x|) eps); <= 1 passes
  bool passed = false;
};
SymmetryTest test_symmetry(Level& a, Kernels& k);

}  // namespace qk::hpc::hpcg

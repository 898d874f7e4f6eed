// Back substitution and the residual check of HPL (HPL_pdtrsv, HPL_pdtest).
#pragma once

#include <vector>

#include "hpl/grid.h"

namespace qk::hpc::hpl {

// Solves U x = y where the factored [A | b] holds U and y = L^-1 P b in its
// last column. Returns x (length N) on every rank. Collective.
std::vector<double> back_substitute(const Grid& g, const Comm& world, LocalMatrix& a);

struct Residual {
  double resid = 0, norm_a = 0, norm_x = 0, norm_b = 0, scaled = 0;
};
// Regenerates [A | b] and measures ||Ax - b||_oo and the norms. Collective.
Residual check_residual(const Grid& g, const Comm& world, int64_t n, int nb,
                        const std::vector<double>& x);

}  // namespace qk::hpc::hpl

// CG and the validation tests (see cg.h).
#include "hpcg/cg.h"

#include <cfloat>
#include <cmath>
#include <random>

namespace qk::hpc::hpcg {

CgResult cg(Level& a, Kernels& k, const std::vector<double>& b, std::vector<double>& x,
            int max_iters, double tolerance, bool precondition, std::vector<double>* history) {
  const int64_t n = a.nrow;
  std::vector<double> p(a.ncol, 0.0), ap(n, 0.0), r(n, 0.0), z(a.ncol, 0.0);
  CgResult res;
  std::copy(x.begin(), x.begin() + n, p.begin());
  k.spmv(a, p.data(), ap.data());
  k.waxpby(n, 1.0, b.data(), -1.0, ap.data(), r.data());
  double normr = std::sqrt(k.dot(n, r.data(), r.data()));
  res.normr0 = normr;
  double rtz = 0.0;
  int it = 1;
  for (; it <= max_iters && normr / res.normr0 > tolerance; ++it) {
    if (precondition)
      k.mg(a, r.data(), z.data());
    else
      std::copy(r.begin(), r.end(), z.begin());
    if (it == 1) {
      std::copy(z.begin(), z.begin() + n, p.begin());
      rtz = k.dot(n, r.data(), z.data());
    } else {
      const double old = rtz;
      rtz = k.dot(n, r.data(), z.data());
      k.waxpby(n, 1.0, z.data(), rtz / old, p.data(), p.data());
    }
    const double pap = k.spmv_dot(a, p.data(), ap.data());
    const double alpha = rtz / pap;
    normr = std::sqrt(k.update_xr(n, alpha, p.data(), ap.data(), x.data(), r.data()));
    res.iters = it;
    if (history) history->push_back(normr / res.normr0);
  }
  res.normr = normr;
  return res;
}

CgTest test_cg(Level& a, Kernels& k, const std::vector<double>& b_orig) {
  // Exaggerate the diagonal (and b with it) of the fine level only.
  const std::vector<double> orig_diag = a.diag;
  std::vector<double> b = b_orig;
  // Global row id of local row i: my box in the global grid.
  const Geometry& g = a.geo;
  for (int64_t i = 0; i < a.nrow; ++i) {
    const int64_t gid = (g.gx0 + i % g.nx) +
                        g.gnx * ((g.gy0 + (i / g.nx) % g.ny) + g.gny * (g.gz0 + i / (int64_t(g.nx) * g.ny)));
    const double scale = gid < 9 ? (gid + 2) * 1.0e6 : 1.0e6;
    a.diag[i] *= scale;
    a.vals[i * kSlots + a.diag_slot[i]] = a.diag[i];
    b[i] *= scale;
  }
  optimize_problem(a, /*recursive=*/false);
  CgTest t;
  std::vector<double> x(a.ncol);
  for (int prec = 0; prec < 2; ++prec)
    for (int call = 0; call < 2; ++call) {
      std::fill(x.begin(), x.end(), 0.0);
      CgResult r = cg(a, k, b, x, 50, 1.0e-12, prec == 1);
      int& worst = prec ? t.prec_iters : t.unprec_iters;
      worst = std::max(worst, r.iters);
    }
  a.diag = orig_diag;
  for (int64_t i = 0; i < a.nrow; ++i) a.vals[i * kSlots + a.diag_slot[i]] = a.diag[i];
  optimize_problem(a, /*recursive=*/false);
  t.passed = t.unprec_iters <= 12 && t.prec_iters <= 2;
  return t;
}

SymmetryTest test_symmetry(Level& a, Kernels& k) {
  const int64_t n = a.nrow;
  std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(k.world().rank()));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> x(a.ncol), y(a.ncol), z(a.ncol);
  for (auto& v : x) v = u(rng);
  for (auto& v : y) v = u(rng);
  const double anorm = 2 * 26.0;
  const double xnorm = std::sqrt(k.dot(n, x.data(), x.data()));
  const double ynorm = std::sqrt(k.dot(n, y.data(), y.data()));
  const double scale = (xnorm * anorm * ynorm + ynorm * anorm * xnorm) * DBL_EPSILON;
  SymmetryTest t;
  // SpMV: x' A y against y' A x.
  k.spmv(a, y.data(), z.data());
  const double xtay = k.dot(n, x.data(), z.data());
  k.spmv(a, x.data(), z.data());
  const double ytax = k.dot(n, y.data(), z.data());
  t.spmv = std::fabs(xtay - ytax) / scale;
  // The preconditioner: x' M^-1 y against y' M^-1 x.
  k.mg(a, y.data(), z.data());
  const double xtmy = k.dot(n, x.data(), z.data());
  k.mg(a, x.data(), z.data());
  const double ytmx = k.dot(n, y.data(), z.data());
  t.mg = std::fabs(xtmy - ytmx) / scale;
  t.passed = t.spmv <= 1.0 && t.mg <= 1.0 && std::isfinite(t.spmv) && std::isfinite(t.mg);
  return t;
}

}  // namespace qk::hpc::hpcg

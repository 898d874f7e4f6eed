// Back substitution and residual check (see solve.h).
//
// Back substitution walks the diagonal blocks from the last up. The owner of
// diagonal block j needs y_j - sum_{l>j} U_jl x_l; each process keeps the
// partial sums of its own columns in `acc`, so one sum over the process row
// (plus b from the process column that holds it) yields the right-hand side.
// The owner solves the triangle and broadcasts x_j to everyone.
#include "hpl/solve.h"

#include <cblas.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "hpl/matgen.h"

namespace qk::hpc::hpl {

std::vector<double> back_substitute(const Grid& g, const Comm& world, LocalMatrix& a) {
  const int64_t n = a.n;
  const int nb = a.nb;
  std::vector<double> x(static_cast<size_t>(n), 0.0);
  std::vector<double> acc(static_cast<size_t>(a.mp), 0.0);
  std::vector<double> r(static_cast<size_t>(nb));
  const int bcol = owner(n, nb, g.npcol);
  const int64_t jlb = g2l(n, nb, g.npcol);
  const int64_t nblocks = (n + nb - 1) / nb;
  for (int64_t blk = nblocks - 1; blk >= 0; --blk) {
    const int64_t k = blk * nb;
    const int jb = static_cast<int>(std::min<int64_t>(nb, n - k));
    const int prow = owner(k, nb, g.nprow), pcol = owner(k, nb, g.npcol);
    const int64_t ii = local_before(k, nb, g.myrow, g.nprow);
    const int64_t jj = local_before(k, nb, g.mycol, g.npcol);
    if (g.myrow == prow) {
      for (int i = 0; i < jb; ++i)
        r[i] = (g.mycol == bcol ? a.at(ii + i, jlb) : 0.0) - acc[ii + i];
      g.row.allreduce_sum(r.data(), jb);
      if (g.mycol == pcol)
        cblas_dtrsv(CblasColMajor, CblasUpper, CblasNoTrans, CblasNonUnit, jb, &a.at(ii, jj),
                    static_cast<int>(a.lda), r.data(), 1);
    }
    world.bcast(r.data(), sizeof(double) * jb, grid_rank(g, prow, pcol));
    std::memcpy(x.data() + k, r.data(), sizeof(double) * jb);
    // My rows above the block take this block's contribution.
    if (g.mycol == pcol && ii > 0)
      cblas_dgemv(CblasColMajor, CblasNoTrans, static_cast<int>(ii), jb, 1.0, &a.at(0, jj),
                  static_cast<int>(a.lda), r.data(), 1, 1.0, acc.data(), 1);
  }
  return x;
}

Residual check_residual(const Grid& g, const Comm& world, int64_t n, int nb,
                        const std::vector<double>& x) {
  const int64_t mp = numroc(n, nb, g.myrow, g.nprow);
  const int64_t nq = numroc(n + 1, nb, g.mycol, g.npcol);
  // Per local row: [sum_j A_ij x_j - b_i, sum_j |A_ij|].
  std::vector<double> sums(static_cast<size_t>(2 * mp), 0.0);
  double norm_b = 0.0;
  const int64_t chunk = nb;
  std::vector<double> cols(static_cast<size_t>(std::max<int64_t>(mp, 1) * chunk));
  for (int64_t jl0 = 0; jl0 < nq; jl0 += chunk) {
    const int64_t jl1 = std::min(nq, jl0 + chunk);
    generate_local_columns(g, n, nb, kHplSeed, jl0, jl1, cols.data(), std::max<int64_t>(mp, 1));
    for (int64_t jl = jl0; jl < jl1; ++jl) {
      const int64_t j = l2g(jl, nb, g.mycol, g.npcol);
      const double* c = cols.data() + (jl - jl0) * std::max<int64_t>(mp, 1);
      if (j == n) {
        for (int64_t i = 0; i < mp; ++i) {
          sums[i] -= c[i];
          norm_b = std::max(norm_b, std::fabs(c[i]));
        }
      } else {
        const double xj = x[j];
        for (int64_t i = 0; i < mp; ++i) {
          sums[i] += c[i] * xj;
          sums[mp + i] += std::fabs(c[i]);
        }
      }
    }
  }
  g.row.allreduce_sum(sums.data(), sums.size());
  Residual r;
  for (int64_t i = 0; i < mp; ++i) {
    r.resid = std::max(r.resid, std::fabs(sums[i]));
    r.norm_a = std::max(r.norm_a, sums[mp + i]);
  }
  // A NaN anywhere must fail the check, so it is carried through as +inf.
  for (int64_t i = 0; i < mp; ++i)
    if (std::isnan(sums[i])) r.resid = INFINITY;
  r.resid = world.allreduce_max(r.resid);
  r.norm_a = world.allreduce_max(r.norm_a);
  r.norm_b = world.allreduce_max(norm_b);
  for (double v : x) r.norm_x = std::isnan(v) ? INFINITY : std::max(r.norm_x, std::fabs(v));
  const double eps = DBL_EPSILON / 2;  // HPL_pdlamch(HPL_MACH_EPS): 2^-53
  r.scaled = r.resid / (eps * (r.norm_a * r.norm_x + r.norm_b) * static_cast<double>(n));
  if (std::isnan(r.scaled)) r.scaled = INFINITY;
  return r;
}

}  // namespace qk::hpc::hpl

// Row swaps, U solve and trailing DGEMM for one panel (see update.h).
//
// With P > 1 the swaps are done by one MPI_Allreduce over the process column:
// each slot of a (jb + d) x ncols buffer is filled by the one process that
// owns the slot's source row (zeros elsewhere, so the sum is exact). The first
// jb slots are the new rows k..k+jb (U, needed by every process row for the
// DGEMM, as in HPL's "long" swap that spreads U); the other d slots are the
// rows displaced below the block, which only their owners write back.
#include "hpl/update.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "qk/base/error.h"

namespace qk::hpc::hpl {
namespace {

struct SwapPlan {
  std::vector<int64_t> src, dst;  // global rows: slot s takes src[s] into dst[s]
};

SwapPlan plan_swaps(const Panel& pan, const double* ipiv) {
  std::map<int64_t, int64_t> at;  // position -> original row now there
  auto get = [&](int64_t r) {
    auto it = at.find(r);
    return it == at.end() ? r : it->second;
  };
  for (int j = 0; j < pan.jb; ++j) {
    const int64_t r1 = pan.k + j, r2 = static_cast<int64_t>(ipiv[j]);
    if (r1 == r2) continue;
    const int64_t s1 = get(r1), s2 = get(r2);
    at[r1] = s2;
    at[r2] = s1;
  }
  SwapPlan plan;
  for (int j = 0; j < pan.jb; ++j) {
    plan.dst.push_back(pan.k + j);
    plan.src.push_back(get(pan.k + j));
  }
  for (const auto& [pos, src] : at)
    if (pos >= pan.k + pan.jb && pos != src) {
      plan.dst.push_back(pos);
      plan.src.push_back(src);
    }
  return plan;
}

}  // namespace

void panel_update(const Panel& pan, const Grid& g, LocalMatrix& a, int64_t jl0, int64_t jl1,
                  UpdateWork& w, bool* inject_fault) {
  const int64_t ncols = jl1 - jl0;
  if (ncols <= 0) return;
  const int jb = pan.jb;
  const int nb = a.nb;
  const double* top = pan.top();
  const double* ipiv = pan.ipiv();
  const bool own_cols = g.mycol == pan.pcol;
  const double* l21 = own_cols ? a.a + pan.below_l0 + pan.jj * a.lda : pan.below();
  const int64_t ldl = own_cols ? a.lda : pan.ld_below();

  double* u;
  int64_t ldu;
  if (g.nprow == 1) {
    // Everything is local: LAPACK-style swaps, column by column for locality.
    for (int64_t jl = jl0; jl < jl1; ++jl) {
      double* col = &a.at(0, jl);
      for (int j = 0; j < jb; ++j) {
        const int64_t r2 = static_cast<int64_t>(ipiv[j]);
        if (r2 != pan.k + j) std::swap(col[pan.ii + j], col[r2]);
      }
    }
    u = &a.at(pan.ii, jl0);
    ldu = a.lda;
  } else {
    const SwapPlan plan = plan_swaps(pan, ipiv);
    const int64_t ns = static_cast<int64_t>(plan.src.size());
    w.slots.assign(static_cast<size_t>(ns * ncols), 0.0);
    for (int64_t s = 0; s < ns; ++s) {
      if (owner(plan.src[s], nb, g.nprow) != g.myrow) continue;
      const int64_t lr = g2l(plan.src[s], nb, g.nprow);
      for (int64_t c = 0; c < ncols; ++c) w.slots[s + c * ns] = a.at(lr, jl0 + c);
    }
    g.col.allreduce_sum(w.slots.data(), w.slots.size());
    for (int64_t s = jb; s < ns; ++s) {
      if (owner(plan.dst[s], nb, g.nprow) != g.myrow) continue;
      const int64_t lr = g2l(plan.dst[s], nb, g.nprow);
      for (int64_t c = 0; c < ncols; ++c) a.at(lr, jl0 + c) = w.slots[s + c * ns];
    }
    u = w.slots.data();
    ldu = ns;
  }

  // U12 = L11^-1 U12, done by every process row on its copy.
  cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, jb,
              static_cast<int>(ncols), 1.0, top, jb, u, static_cast<int>(ldu));
  if (g.nprow > 1 && g.myrow == pan.prow)
    for (int64_t c = 0; c < ncols; ++c)
      std::memcpy(&a.at(pan.ii, jl0 + c), u + c * ldu, sizeof(double) * jb);

  // A22 -= L21 U12 on my rows below the block.
  if (pan.mbelow > 0) {
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(pan.mbelow),
                static_cast<int>(ncols), jb, -1.0, l21, static_cast<int>(ldl), u,
                static_cast<int>(ldu), 1.0, &a.at(pan.below_l0, jl0), static_cast<int>(a.lda));
    if (*inject_fault) {
      a.at(pan.below_l0, jl0) += 1.0;  // the deliberate error the tests look for
      *inject_fault = false;
    }
  }
}

}  // namespace qk::hpc::hpl

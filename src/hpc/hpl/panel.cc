// Recursive panel factorization with partial pivoting (HPL_pdrpan*, HPL_pdpan*).
//
// Note [stacked panel]: rows k..k+jb of the panel are replicated as `top` on
// every process of the owning column; rows below are updated in place by their
// owners. Every operation below therefore splits into a redundant part on `top`
// and a local part on `below`, and the only communication is the pivot search.
//
// RFACT chooses how the recursion orders the updates between its NDIV
// sub-panels; below NBMIN columns the same three orders run column by column
// with PFACT. Left, Crout and Right perform the same arithmetic, in different
// orders (see docs/hpc.md).
#include "hpl/panel.h"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <map>

#include "qk/base/error.h"

namespace qk::hpc::hpl {
namespace {

// ---------------------------------------------------------------------------
// The pivot reduction: (|v|, global row, row[jb]); larger |v| wins, ties go to
// the smaller global row so every process picks the same pivot.
void pivot_op(void* in, void* inout, int* len, MPI_Datatype* dt) {
  int bytes = 0;
  MPI_Type_size(*dt, &bytes);
  const int n = bytes / static_cast<int>(sizeof(double));
  auto* a = static_cast<double*>(in);
  auto* b = static_cast<double*>(inout);
  for (int i = 0; i < *len; ++i, a += n, b += n) {
    if (a[0] > b[0] || (a[0] == b[0] && a[1] < b[1])) std::memcpy(b, a, sizeof(double) * n);
  }
}

struct MpiCache {
  MPI_Op op = MPI_OP_NULL;
  std::map<int, MPI_Datatype> types;  // by panel width
};
MpiCache& mpi_cache() {
  static MpiCache c;
  return c;
}

MPI_Datatype pivot_type(int jb) {
  auto& c = mpi_cache();
  auto it = c.types.find(jb);
  if (it != c.types.end()) return it->second;
  MPI_Datatype t;
  QK_MPI_CHECK(MPI_Type_contiguous(jb + 2, MPI_DOUBLE, &t));
  QK_MPI_CHECK(MPI_Type_commit(&t));
  c.types[jb] = t;
  return t;
}

MPI_Op pivot_mpi_op() {
  auto& c = mpi_cache();
  if (c.op == MPI_OP_NULL) QK_MPI_CHECK(MPI_Op_create(pivot_op, /*commute=*/1, &c.op));
  return c.op;
}

// ---------------------------------------------------------------------------
class PanelFactor {
 public:
  PanelFactor(Panel& pan, const Grid& g, LocalMatrix& a, const HplParams& p)
      : pan_(pan), g_(g), p_(p), jb_(pan.jb), top_(pan.top()), ipiv_(pan.ipiv()),
        below_(a.a + pan.below_l0 + pan.jj * a.lda), ldb_(a.lda), mb_(pan.mbelow),
        nb_(a.nb), below_l0_(pan.below_l0) {
    if (g_.nprow > 1) cand_.resize(jb_ + 2);
  }

  // Columns [c0, c0 + n) hold every update from columns < c0.
  void factor(int c0, int n, bool leaf) {
    if (!leaf && n <= p_.nbmin) leaf = true;
    if (leaf && n == 1) {
      pivot_column(c0);
      return;
    }
    const HplFact variant = leaf ? p_.pfact : p_.rfact;
    const int nblocks = leaf ? n : std::min(p_.ndiv, n);
    const int end = c0 + n;
    int b0 = c0;
    for (int b = 0; b < nblocks; ++b) {
      const int w = n / nblocks + (b < n % nblocks ? 1 : 0);
      const int b1 = b0 + w;
      switch (variant) {
        case HplFact::kLeft:
          if (b0 > c0) {
            trsm_top(c0, b0, b0, b1);
            gemm_lower(c0, b0, b0, b1);
          }
          factor(b0, w, leaf);
          break;
        case HplFact::kCrout:
          if (b0 > c0) gemm_lower(c0, b0, b0, b1);
          factor(b0, w, leaf);
          if (b1 < end) {
            if (b0 > c0) gemm_top_rows(b0, b1, c0, b1, end);
            trsm_top(b0, b1, b1, end);
          }
          break;
        case HplFact::kRight:
          factor(b0, w, leaf);
          if (b1 < end) {
            trsm_top(b0, b1, b1, end);
            gemm_lower(b0, b1, b1, end);
          }
          break;
      }
      b0 = b1;
    }
  }

 private:
  double& T(int i, int j) { return top_[i + int64_t(j) * jb_]; }
  double& B(int64_t i, int j) { return below_[i + int64_t(j) * ldb_]; }

  // Top rows [r0, r1), columns [d0, d1) := L(r0:r1, r0:r1)^-1 (unit lower) * itself.
  void trsm_top(int r0, int r1, int d0, int d1) {
    cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, r1 - r0, d1 - d0,
                1.0, &T(r0, r0), jb_, &T(r0, d0), jb_);
  }
  // Rows >= r1 (top and below), columns [d0, d1) -= L(rows, r0:r1) U(r0:r1, d0:d1).
  void gemm_lower(int r0, int r1, int d0, int d1) {
    const int kk = r1 - r0, nn = d1 - d0;
    if (jb_ - r1 > 0)
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, jb_ - r1, nn, kk, -1.0, &T(r1, r0),
                  jb_, &T(r0, d0), jb_, 1.0, &T(r1, d0), jb_);
    if (mb_ > 0)
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mb_), nn, kk, -1.0,
                  &B(0, r0), static_cast<int>(ldb_), &T(r0, d0), jb_, 1.0, &B(0, d0),
                  static_cast<int>(ldb_));
  }
  // Crout's row update: top rows [r0, r1), columns [d0, d1) -= L(r0:r1, c0:r0) U(c0:r0, d0:d1).
  void gemm_top_rows(int r0, int r1, int c0, int d0, int d1) {
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d1 - d0, r0 - c0, -1.0,
                &T(r0, c0), jb_, &T(c0, d0), jb_, 1.0, &T(r0, d0), jb_);
  }

  // Finds the pivot of column c, swaps it into top row c, scales the column.
  void pivot_column(int c) {
    double best = -1.0;
    int64_t gbest = -1;
    int tbest = -1;
    int64_t bbest = -1;
    for (int t = c; t < jb_; ++t) {
      double v = std::fabs(T(t, c));
      if (v > best) best = v, gbest = pan_.k + t, tbest = t;
    }
    if (mb_ > 0) {
      int64_t b = cblas_idamax(static_cast<int>(mb_), &B(0, c), 1);
      double v = std::fabs(B(b, c));
      if (v > best) {
        best = v, tbest = -1, bbest = b;
        gbest = l2g(below_l0_ + b, nb_, g_.myrow, g_.nprow);
      }
    }
    if (g_.nprow > 1) {
      // Everyone contributes its best candidate row; the reduction picks one.
      cand_[0] = best;
      cand_[1] = static_cast<double>(gbest);
      for (int j = 0; j < jb_; ++j) cand_[2 + j] = tbest >= 0 ? T(tbest, j) : B(bbest, j);
      QK_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, cand_.data(), 1, pivot_type(jb_), pivot_mpi_op(),
                                 g_.col.raw()));
      const int64_t gpiv = static_cast<int64_t>(cand_[1]);
      if (gpiv < pan_.k + jb_) {
        swap_top(c, static_cast<int>(gpiv - pan_.k));
      } else {
        // The pivot lives below the top block on one process: it takes the old
        // top row c, everyone puts the pivot row into top row c.
        if (gpiv == gbest && tbest < 0)
          for (int j = 0; j < jb_; ++j) B(bbest, j) = T(c, j);
        for (int j = 0; j < jb_; ++j) T(c, j) = cand_[2 + j];
      }
      ipiv_[c] = static_cast<double>(gpiv);
    } else {
      if (tbest >= 0) {
        swap_top(c, tbest);
      } else {
        for (int j = 0; j < jb_; ++j) std::swap(B(bbest, j), T(c, j));
      }
      ipiv_[c] = static_cast<double>(gbest);
    }
    const double piv = T(c, c);
    if (piv != 0.0) {
      // Like LAPACK dgetf2: multiply by the reciprocal unless it would overflow.
      if (std::fabs(piv) >= 2.2250738585072014e-308) {
        const double r = 1.0 / piv;
        for (int t = c + 1; t < jb_; ++t) T(t, c) *= r;
        if (mb_ > 0) cblas_dscal(static_cast<int>(mb_), r, &B(0, c), 1);
      } else {
        for (int t = c + 1; t < jb_; ++t) T(t, c) /= piv;
        for (int64_t i = 0; i < mb_; ++i) B(i, c) /= piv;
      }
    }
    // A zero pivot leaves the column as it is; the residual check reports it.
  }

  void swap_top(int c, int t) {
    if (t == c) return;
    for (int j = 0; j < jb_; ++j) std::swap(T(c, j), T(t, j));
  }

  Panel& pan_;
  const Grid& g_;
  const HplParams& p_;
  const int jb_;
  double* top_;
  double* ipiv_;
  double* below_;
  const int64_t ldb_;
  const int64_t mb_;
  const int nb_;
  const int64_t below_l0_;
  std::vector<double> cand_;
};

}  // namespace

void panel_init(Panel& pan, const Grid& g, const LocalMatrix& a, int64_t k) {
  pan.k = k;
  pan.jb = static_cast<int>(std::min<int64_t>(a.nb, a.n - k));
  pan.prow = owner(k, a.nb, g.nprow);
  pan.pcol = owner(k, a.nb, g.npcol);
  pan.ii = local_before(k, a.nb, g.myrow, g.nprow);
  pan.jj = local_before(k, a.nb, g.mycol, g.npcol);
  pan.below_l0 = pan.ii + (g.myrow == pan.prow ? pan.jb : 0);
  pan.mbelow = a.mp - pan.below_l0;
  pan.buf.assign(static_cast<size_t>(pan.jb) * pan.jb + pan.jb + pan.mbelow * pan.jb, 0.0);
  pan.have = false;
}

void panel_factor(Panel& pan, const Grid& g, LocalMatrix& a, const HplParams& p) {
  QK_INTERNAL_ASSERT(g.mycol == pan.pcol);
  const int jb = pan.jb;
  double* top = pan.top();
  // The top block starts on its owner and is replicated down the column.
  if (g.myrow == pan.prow)
    for (int j = 0; j < jb; ++j)
      std::memcpy(top + int64_t(j) * jb, &a.at(pan.ii, pan.jj + j), sizeof(double) * jb);
  g.col.bcast(top, sizeof(double) * jb * jb, pan.prow);

  PanelFactor(pan, g, a, p).factor(0, jb, /*leaf=*/false);

  if (g.myrow == pan.prow)
    for (int j = 0; j < jb; ++j)
      std::memcpy(&a.at(pan.ii, pan.jj + j), top + int64_t(j) * jb, sizeof(double) * jb);
  // The rows below travel with the broadcast; the owner's update reads A itself.
  if (g.npcol > 1 && pan.mbelow > 0)
    for (int j = 0; j < jb; ++j)
      std::memcpy(pan.below() + j * pan.mbelow, &a.at(pan.below_l0, pan.jj + j),
                  sizeof(double) * pan.mbelow);
  pan.have = true;
}

void panel_release_mpi_types() {
  auto& c = mpi_cache();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (auto& [w, t] : c.types) MPI_Type_free(&t);
    if (c.op != MPI_OP_NULL) MPI_Op_free(&c.op);
  }
  c.types.clear();
  c.op = MPI_OP_NULL;
}

}  // namespace qk::hpc::hpl

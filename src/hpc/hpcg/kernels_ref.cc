// The reference kernels (HPCG 3.1 ComputeSPMV_ref, ComputeSYMGS_ref,
// ComputeMG_ref, ComputeDotProduct_ref, ComputeWAXPBY_ref): serial per rank,
// each vector operation its own pass. These define the arithmetic the
// optimized path must reproduce.
#include <mpi.h>

#include <algorithm>

#include "hpcg/kernels.h"

namespace qk::hpc::hpcg {

void Kernels::mg(Level& a, const double* r, double* x) {
  const double t0 = MPI_Wtime();
  std::fill(x, x + a.ncol, 0.0);
  if (a.coarse) {
    symgs(a, r, x);  // pre-smoothing
    residual_restrict(a, r, x);
    const double tsub = MPI_Wtime();
    mg(*a.coarse, a.rc.data(), a.xc.data());
    times.mg -= MPI_Wtime() - tsub;  // counted once, by the outer call
    for (size_t i = 0; i < a.f2c.size(); ++i) x[a.f2c[i]] += a.xc[i];  // prolongation
    symgs(a, r, x);  // post-smoothing
  } else {
    symgs(a, r, x);
  }
  times.mg += MPI_Wtime() - t0;
}

void Kernels::residual_restrict(Level& a, const double* r, double* x) {
  const double keep = times.spmv;
  spmv(a, x, a.axf.data());
  times.spmv = keep;  // part of the preconditioner's time
  for (size_t i = 0; i < a.f2c.size(); ++i) a.rc[i] = r[a.f2c[i]] - a.axf[a.f2c[i]];
}

double Kernels::dot(int64_t n, const double* x, const double* y) {
  const double t0 = MPI_Wtime();
  double s = 0.0;
  if (x == y)
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  else
    for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  s = world_.allreduce_sum(s);
  times.dot += MPI_Wtime() - t0;
  return s;
}

void Kernels::waxpby(int64_t n, double alpha, const double* x, double beta, const double* y,
                     double* w) {
  const double t0 = MPI_Wtime();
  if (alpha == 1.0)
    for (int64_t i = 0; i < n; ++i) w[i] = x[i] + beta * y[i];
  else if (beta == 1.0)
    for (int64_t i = 0; i < n; ++i) w[i] = alpha * x[i] + y[i];
  else
    for (int64_t i = 0; i < n; ++i) w[i] = alpha * x[i] + beta * y[i];
  times.waxpby += MPI_Wtime() - t0;
}

double Kernels::spmv_dot(Level& a, double* p, double* ap) {
  spmv(a, p, ap);
  return dot(a.nrow, p, ap);
}

double Kernels::update_xr(int64_t n, double alpha, const double* p, const double* ap, double* x,
                          double* r) {
  waxpby(n, 1.0, x, alpha, p, x);
  waxpby(n, 1.0, r, -alpha, ap, r);
  return dot(n, r, r);
}

namespace {

class ReferenceKernels final : public Kernels {
 public:
  using Kernels::Kernels;

  void spmv(Level& a, double* x, double* y) override {
    const double t0 = MPI_Wtime();
    exchange_halo(a, world_, x);
    for (int64_t i = 0; i < a.nrow; ++i) {
      const double* v = &a.vals[i * kSlots];
      const int32_t* c = &a.cols[i * kSlots];
      double sum = 0.0;
      for (int j = 0; j < a.nnz[i]; ++j) sum += v[j] * x[c[j]];
      y[i] = sum;
    }
    times.spmv += MPI_Wtime() - t0;
  }

  void symgs(Level& a, const double* r, double* x) override {
    exchange_halo(a, world_, x);
    for (int64_t i = 0; i < a.nrow; ++i) row(a, r, x, i);
    for (int64_t i = a.nrow - 1; i >= 0; --i) row(a, r, x, i);
  }

 private:
  static void row(const Level& a, const double* r, double* x, int64_t i) {
    const double* v = &a.vals[i * kSlots];
    const int32_t* c = &a.cols[i * kSlots];
    const double d = a.diag[i];
    double sum = r[i];
    for (int j = 0; j < a.nnz[i]; ++j) sum -= v[j] * x[c[j]];
    sum += x[i] * d;  // the loop removed the diagonal term too
    x[i] = sum / d;
  }
};

}  // namespace

std::unique_ptr<Kernels> make_reference_kernels(const Comm& world) {
  return std::make_unique<ReferenceKernels>(world);
}

}  // namespace qk::hpc::hpcg

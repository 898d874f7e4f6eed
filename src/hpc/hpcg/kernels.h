// The HPCG kernels behind one interface, so CG, the validation tests and the
// timed sets run either implementation: the reference path (HPCG 3.1's *_ref
// kernels, serial per rank) or the optimized path (kernels_opt.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "hpcg/problem.h"

namespace qk::hpc::hpcg {

struct KernelTimes {
  double dot = 0, waxpby = 0, spmv = 0, mg = 0;
};

class Kernels {
 public:
  explicit Kernels(const Comm& world) : world_(world) {}
  virtual ~Kernels() = default;

  // y = A x (x has ncol entries; its halo is refreshed).
  virtual void spmv(Level& a, double* x, double* y) = 0;
  // One symmetric Gauss-Seidel sweep (forward then backward) on A x = r.
  virtual void symgs(Level& a, const double* r, double* x) = 0;
  // x = M^-1 r: the multigrid V-cycle (x is zeroed first).
  virtual void mg(Level& a, const double* r, double* x);
  // Global dot product of n local entries.
  virtual double dot(int64_t n, const double* x, const double* y);
  // w = alpha x + beta y.
  virtual void waxpby(int64_t n, double alpha, const double* x, double beta, const double* y,
                      double* w);
  // Ap = A p, returns the global p . Ap.
  virtual double spmv_dot(Level& a, double* p, double* ap);
  // x += alpha p; r -= alpha ap; returns the global r . r.
  virtual double update_xr(int64_t n, double alpha, const double* p, const double* ap, double* x,
                           double* r);

  const Comm& world() const { return world_; }
  KernelTimes times;

 protected:
  // rc = (r - A x) at the coarse points, the reference way (full SpMV, then pick).
  virtual void residual_restrict(Level& a, const double* r, double* x);

  const Comm& world_;
};

std::unique_ptr<Kernels> make_reference_kernels(const Comm& world);
std::unique_ptr<Kernels> make_optimized_kernels(const Comm& world);

}  // namespace qk::hpc::hpcg

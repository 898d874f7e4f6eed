// The Ewald real-space correction as cubic Hermite tables, so the pair
// kernel needs no erfc() and exp() per pair (they were half its time):
//
//   erfc(beta r)/r      = 1/r - E(r),   E(r) = erf(beta r)/r
//   force / r (fscal)   = 1/r^3 + G(r), G(r) = (1/r) dE/dr
//
// Both E and G are smooth and finite at r = 0. Nodes every 1/1000 nm hold
// each function and its exact derivative (built in long double), so the
// interpolation error is below 1e-12 relative at cut-offs around 1 nm, far
// under the 1e-9 at which our energies already differ from GROMACS's.
// GROMACS's own kernels tabulate the same correction. The cluster kernel
// (nonbonded.cc) reads the nodes directly, in double or in float.
#pragma once

#include <cstddef>
#include <vector>

namespace qk::md {

class EwaldTable {
 public:
  EwaldTable() = default;
  EwaldTable(double beta, double rmax);
  // E(r) and G(r) at 0 <= r <= rmax.
  void lookup(double r, double* e, double* g) const {
    const double t = r * scale_;
    const int i = static_cast<int>(t);
    const double u = t - i, u2 = u * u, um = 1 - u, um2 = um * um;
    const double h00 = (1 + 2 * u) * um2, h10 = u * um2, h01 = u2 * (3 - 2 * u), h11 = -u2 * um;
    const double* n = &nodes_[static_cast<size_t>(i) * 4];  // node i: E, h E', G, h G'; then node i + 1
    *e = h00 * n[0] + h10 * n[1] + h01 * n[4] + h11 * n[5];
    *g = h00 * n[2] + h10 * n[3] + h01 * n[6] + h11 * n[7];
  }

 private:
  double scale_ = 0;          // nodes per nm
  std::vector<double> nodes_;
  std::vector<float> nodes_float_;

 public:
  double scale() const { return scale_; }
  // Node i's E, h E', G, h G' at [4 i .. 4 i + 4) (h = 1 / scale()), in double or float.
  template <typename Real>
  const Real* nodes() const {
    if constexpr (sizeof(Real) == sizeof(float)) {
      return nodes_float_.data();
    } else {
      return nodes_.data();
    }
  }
};

// The same two functions for the single-precision kernel, without tables
// (a gather per lane is what made the float kernel slow). E as a polynomial
// of degree kDegree in u = 2 r^2 / rmax^2 - 1, from Chebyshev interpolation
// (in u the monomial coefficients stay small, so float evaluation loses
// little), evaluated by Estrin's scheme for a short dependency chain; G, which
// every step needs, as a ratio P(u) / Q(u) of low degrees (GROMACS also uses
// a rational fit in (beta r)^2), whose 1/Q the kernel takes from the division
// it does for 1/r anyway. The constructor checks both against erf in long
// double: within 1e-6 of each function's largest value for beta rmax up to
// about 4 (ewald-rtol down to ~1e-8), else it refuses.
class EwaldPolynomial {
 public:
  static constexpr int kDegree = 15;  // 16 coefficients, the last ones ~0: Estrin's full tree
  EwaldPolynomial() = default;
  EwaldPolynomial(double beta, double rmax);
  const float* e() const { return e_; }  // coefficients of E in u, [0 .. kDegree]
  double u_scale() const { return u_scale_; }  // u = u_scale r^2 - 1
  // G = P(u) / Q(u) (degrees kNum, kDen; Q's constant term 1), fitted by iterated weighted least
  // squares (Sanathanan-Koerner).
  static constexpr int kNum = 5, kDen = 4;
  const float* g_num() const { return gp_; }
  const float* g_den() const { return gq_; }

  // sum_k c[k] u^k by Estrin's scheme (kDegree = 15).
  template <typename Real>
  static Real eval(const Real* c, Real u) {
    const Real u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
    const Real q0 = c[0] + c[1] * u, q1 = c[2] + c[3] * u, q2 = c[4] + c[5] * u, q3 = c[6] + c[7] * u;
    const Real q4 = c[8] + c[9] * u, q5 = c[10] + c[11] * u, q6 = c[12] + c[13] * u, q7 = c[14] + c[15] * u;
    const Real r0 = q0 + q1 * u2, r1 = q2 + q3 * u2, r2 = q4 + q5 * u2, r3 = q6 + q7 * u2;
    return (r0 + r1 * u4) + (r2 + r3 * u4) * u8;
  }
  // P(u) and Q(u) of the ratio, by Estrin's scheme.
  template <typename Real>
  static Real eval_num(const Real* c, Real u) {
    const Real u2 = u * u;
    return (c[0] + c[1] * u) + (c[2] + c[3] * u) * u2 + (c[4] + c[5] * u) * (u2 * u2);
  }
  template <typename Real>
  static Real eval_den(const Real* c, Real u) {
    const Real u2 = u * u;
    return (c[0] + c[1] * u) + (c[2] + c[3] * u) * u2 + c[4] * (u2 * u2);
  }

 private:
  float e_[kDegree + 1] = {};
  float gp_[kNum + 1] = {}, gq_[kDen + 1] = {};
  double u_scale_ = 0;
};

}  // namespace qk::md

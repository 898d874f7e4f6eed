// SETTLE (Miyamoto & Kollman 1992): rigid water, solved analytically. This is
// GROMACS's formulation (mdlib/settle.cpp: distances from the oxygen instead of
// the centre of mass, minimum-image vectors so molecules may straddle the box).
//
// Given the reference positions x (which satisfy the constraints) and
// unconstrained new positions xprime, moves xprime onto the constraints along
// the reference bonds; optionally adds the displacement / dt to v, and
// accumulates sum_i r_i (x) m_i dx_i, from which the constraint virial is
// -1/(2 dt^2) times that (GROMACS's vir_r_m_dr, negated).
#pragma once

#include <cstdint>
#include <vector>

#include "pbc.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

class SettleConstraints {
 public:
  // unit_masses: every atom weighs 1, as GROMACS sets the masses for energy minimization (mdatoms.cpp),
  // so minimization constrains and projects with equal weights.
  explicit SettleConstraints(const Topology& top, bool unit_masses = false);
  bool empty() const { return water_.empty(); }
  // False when some water was too distorted to solve (GROMACS's SETTLE error: in MD the run is
  // unstable, in minimization the trial step is rejected); the others are constrained regardless.
  [[nodiscard]] bool apply(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime, std::vector<Vec3>* v,
             double invdt, Mat3* r_m_dx) const;
  // Removes from per-atom vectors d (forces used as displacements, as in minimization) what would
  // stretch the constraints at x, with mass-weighted corrections (GROMACS's settle_proj for
  // ConstraintVariable::ForceDispl): afterwards (d_a - d_b) . r_ab = 0 for every constrained pair.
  void project(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* d) const;

 private:
  struct Water {
    int ow;
    double mO, mH, wh, ra, rb, rc, irc2;
  };
  bool apply_range(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime, std::vector<Vec3>* v,
                   double invdt, Mat3* r_m_dx, int64_t w0, int64_t w1) const;
  std::vector<Water> water_;
};

}  // namespace qk::md

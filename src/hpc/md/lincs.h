// LINCS (Hess, Bekker, Berendsen & Fraaije 1997) for bond constraints, as
// GROMACS's mdlib/lincs.cpp does it with its defaults lincs-order = 4 and
// lincs-iter = 1: the constraints are solved along the reference bond
// directions, the coupling matrix (I - A)^-1 approximated by the series
// I + A + ... + A^order, then one correction for the lengthening that
// rotation causes. Used for constraints = h-bonds on bonds to hydrogens
// (water under [settles] goes to SETTLE instead).
//
// Given the reference positions x (which satisfy the constraints) and
// unconstrained new positions xprime, moves xprime onto the constraints;
// optionally adds the displacement / dt to v, and accumulates
// sum_i r_i (x) m_i dx_i as SettleConstraints does (settle.h).
#pragma once

#include <string>
#include <vector>

#include "pbc.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

struct BondConstraint {
  int i = 0, j = 0;
  double length = 0;  // nm
};

// GROMACS's h-bonds: the bonds with an atom whose name starts with H (case-insensitive).
std::vector<BondConstraint> h_bond_constraints(const Topology& top);
// The bonds the mdp's constraints turn into constraints: none, h-bonds, or all-bonds (every harmonic bond).
std::vector<BondConstraint> bond_constraints(const Topology& top, const MdpOptions& mdp);
// Those and the topology's [ constraints ]: everything LINCS holds.
std::vector<BondConstraint> lincs_constraints(const Topology& top, const MdpOptions& mdp);
// top without those bonds: they no longer contribute to Bond.
Topology without_bonds(const Topology& top, const std::vector<BondConstraint>& constrained);

class Lincs {
 public:
  Lincs(const Topology& top, std::vector<BondConstraint> constraints, int order = 4, int iterations = 1);
  bool empty() const { return c_.empty(); }
  int size() const { return static_cast<int>(c_.size()); }
  // False when a bond rotated too far within the step to be corrected (GROMACS's LINCS warning: the
  // simulation is unstable); the positions are then not trustworthy.
  // GROMACS's "Constr. rmsd": the root mean square of |r_ij| / d_ij - 1 over the constraints at x.
  double rms_deviation(const RectBox& box, const std::vector<Vec3>& x) const;
  // The sum of the squared relative deviations (rms_deviation's, before its mean and root).
  double squared_deviations(const RectBox& box, const std::vector<Vec3>& x) const;
  [[nodiscard]] bool apply(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime,
                           std::vector<Vec3>* v, double invdt, Mat3* r_m_dx) const;

 private:
  std::vector<BondConstraint> c_;
  std::vector<double> invmass_;
  std::vector<double> blc_;            // 1 / sqrt(1/m_i + 1/m_j) per constraint
  std::vector<int> coupled_begin_;     // constraints sharing an atom with constraint b: [begin[b], begin[b + 1])
  std::vector<int> coupled_;           // their indices
  std::vector<double> coupling_coef_;  // GROMACS's blmf: +-1/m_shared blc_b blc_k
  int order_, iterations_;
};

}  // namespace qk::md

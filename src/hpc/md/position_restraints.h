// Harmonic position restraints ([ position_restraints ] funct 1), as
// GROMACS's listed_forces/position_restraints.cpp: V = sum_d k_d / 2
// (x_d - x_ref,d)^2 over the nearest image of each atom's reference
// position, which comes from a reference structure (grompp's -r, by default
// the start coordinates). With refcoord-scaling = com the references are
// kept relative to their mass-weighted centre, which scales with the box
// under pressure coupling; with no they stay where they are. The virial is
// GROMACS's: per dimension -1/2 (dx + r) f, r the reference's absolute
// (no) or centre-relative (com) position.
#pragma once

#include <vector>

#include "pbc.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

class PositionRestraints {
 public:
  // `reference`: every atom's reference position; `box`: the reference structure's box.
  PositionRestraints(const Topology& top, const std::vector<Vec3>& reference, const Vec3& box, RefCoordScaling mode);
  bool empty() const { return atoms_.empty(); }
  // The restraints on the atoms `local` names (each atom of the topology: its index among some of them, -1
  // where absent: a domain's home atoms), renumbered; the references and their centre as they are.
  PositionRestraints select(const std::vector<int>& local) const;
  // Adds the forces to f and the virial to *virial; returns the energy.
  double apply(const std::vector<Vec3>& x, const RectBox& box, std::vector<Vec3>* f, Mat3* virial) const;

 private:
  std::vector<int> atoms_;
  std::vector<Vec3> k_, ref_;  // ref_: absolute (no) or relative to the centre (com)
  Vec3 com_box_{};             // com: the centre in units of the box
  RefCoordScaling mode_;
};

}  // namespace qk::md

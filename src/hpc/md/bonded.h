// Bonded interactions: harmonic bonds ("Bond"), harmonic angles ("Angle"),
// dihedrals ("Proper Dih.", "Ryckaert-Bell.", "Improper Dih.", "Per. Imp. Dih.":
// topology.h's Dihedral, forces as GROMACS's do_dih_fup) and
// 1-4 pairs ("LJ-14": plain LJ with the pair's c6/c12; "Coulomb-14":
// fudgeQQ f qi qj / r), without cut-off, as GROMACS computes them.
#pragma once

#include <vector>

#include "pbc.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

struct BondedEnergies {
  double bond = 0, angle = 0, lj14 = 0, coulomb14 = 0;
  double proper_dih = 0, rb_dih = 0, improper_dih = 0, periodic_improper_dih = 0;
  Mat3 virial{};
};

BondedEnergies bonded_forces(const std::vector<Vec3>& x, const RectBox& box, const Topology& top, double epsilon_r,
                             std::vector<Vec3>* f);

}  // namespace qk::md

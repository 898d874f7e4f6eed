// The pair list's buffers and update intervals from the mdp's
// verlet-buffer-tolerance, as GROMACS 2022 sets them (grompp's and mdrun's
// calc_verletbuf.cpp and pairlist_tuning.cpp): atoms move by Gaussian
// thermal displacements over a list's lifetime (constrained atoms by the
// rotation about their partner plus their pair's centre of mass), and the
// energy of the pairs that could enter the cut-off unseen, from the
// potentials' derivatives at the cut-off, must stay under the tolerance
// (kJ/mol/ps per atom). GROMACS then raises nstlist (20 .. 100) while the
// list grows by at most 25-35% and prunes an inner list every
// nstlist_prune steps, the shortest interval at which it needs a buffer.
// The estimate is an overestimate (GROMACS's runs drift well below it).
#pragma once

#include <string>
#include <vector>

#include "lincs.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

// The cluster sizes the estimate assumes (GROMACS's 4x4 for its CPU kernels,
// as qk md's; 1x1 gives the buffer an atom-pair list would need).
struct ListClusters {
  int i = 4, j = 4;
};

// The list radius (nm, the cut-off plus a buffer in steps of 0.001 nm) whose
// estimated drift over `lifetime` steps, for a list kept `nstlist` steps,
// is within mdp.verlet_buffer_tolerance, at `temperature` K.
double verlet_buffer_rlist(const Topology& top, const std::vector<BondConstraint>& constraints,
                           const MdpOptions& mdp, double box_volume, double temperature, int nstlist, int lifetime,
                           ListClusters clusters = {});

// GROMACS's setup for an MD run: `temperature` is the coupling's reference
// (or, without coupling, the start velocities'); a box too small for the
// list (half its shortest side), energy minimization or a tolerance <= 0
// give the exact list; NVE from zero temperature a 10% buffer, as grompp.
PairListSetup gromacs_pair_list_setup(const Topology& top, const std::vector<BondConstraint>& constraints,
                                      const MdpOptions& mdp, const Vec3& box, double temperature);

}  // namespace qk::md

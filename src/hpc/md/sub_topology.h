// The part of a topology on some of its atoms: a domain's home atoms (and its halo), for the kernels
// that take a whole Topology (domain_decomposition.h).
#pragma once

#include <climits>
#include <vector>

#include "lincs.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

// Each atom of a topology of num_atoms: its index in `atoms`, -1 where absent.
std::vector<int> local_indices(int num_atoms, const std::vector<int>& atoms);

// Atoms `atoms` of `top` (global indices, in the order given; `local`: their local_indices) as a topology
// of their own: the per-atom arrays in that order and every interaction, exclusion, SETTLE, virtual site,
// restraint and constraint whose atoms are all among the first `interacting` of them, renumbered; the
// [defaults] as they are; of the atom types only those the atoms have (renumbered: a force field defines
// hundreds, and the pair tables grow as their square). Give whole molecules: what crosses the selection's
// edge is left out. (A domain's halo comes after its home atoms: their own interactions are another domain's.)
Topology select_atoms(const Topology& top, const std::vector<int>& atoms, const std::vector<int>& local,
                      int interacting = INT32_MAX);

// The constraints among `local`'s atoms, renumbered.
std::vector<BondConstraint> select_constraints(const std::vector<BondConstraint>& constraints,
                                               const std::vector<int>& local);

}  // namespace qk::md

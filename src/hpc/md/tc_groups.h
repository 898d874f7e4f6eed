// The temperature-coupling groups of an MD run (the mdp's tc-grps, tau-t and
// ref-t): each atom's group and each group's degrees of freedom as grompp
// counts them (readir.cpp calc_nrdf_tc): 3 per atom, half a degree from each
// atom of a constraint, one from each atom of a SETTLE, then the centre of
// mass's 3 taken from every group in proportion (comm-mode Linear).
#pragma once

#include <string>
#include <vector>

#include "index_groups.h"
#include "lincs.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

struct TcGroups {
  std::vector<std::string> names;
  std::vector<int> group_of_atom;
  std::vector<double> ndf;             // per group
  std::vector<double> ref_t, tau_t;    // per group; tau_t < 0: not coupled
  double total_ndf() const;
};

// The groups the mdp names, from `groups` (default_groups, then an index
// file's). Every atom must be in exactly one (grompp's rule); tau-t and
// ref-t need one value per group. Errors name the mdp and what to write.
TcGroups tc_groups(const Topology& top, const std::vector<BondConstraint>& constraints, const MdpOptions& mdp,
                   const std::vector<AtomGroup>& groups);

}  // namespace qk::md

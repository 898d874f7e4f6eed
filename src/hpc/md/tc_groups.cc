#include "tc_groups.h"

#include <algorithm>

#include "qk/base/error.h"

namespace qk::md {

double TcGroups::total_ndf() const {
  double s = 0;
  for (double d : ndf) s += d;
  return s;
}

TcGroups tc_groups(const Topology& top, const std::vector<BondConstraint>& constraints, const MdpOptions& mdp,
                   const std::vector<AtomGroup>& groups) {
  const int n = top.num_atoms();
  TcGroups tc;
  tc.names = mdp.tc_grps;
  const size_t ng = tc.names.size();
  QK_CHECK(ng >= 1, mdp.source, ": tc-grps names no group");
  const bool coupled = mdp.tcoupl != Thermostat::kNo;
  if (coupled) {
    QK_CHECK(mdp.tau_t.size() == ng && mdp.ref_t.size() == ng, mdp.source, ": tc-grps names ", ng,
             " group(s), tau-t has ", mdp.tau_t.size(), " value(s) and ref-t ", mdp.ref_t.size(),
             "; give one of each per group, in the same order");
    tc.tau_t = mdp.tau_t;
    tc.ref_t = mdp.ref_t;
  } else {
    tc.tau_t.assign(ng, -1);
    tc.ref_t.assign(ng, 0);
  }
  tc.group_of_atom.assign(n, -1);
  for (size_t g = 0; g < ng; ++g) {
    const AtomGroup& ag = find_group(groups, tc.names[g], mdp.source + ": tc-grps");
    for (int a : ag.atoms) {
      QK_CHECK(tc.group_of_atom[a] < 0, mdp.source, ": atom ", a + 1, " (", top.atom_name[a], " of residue ",
               top.residue_name[a], " ", top.residue_number[a], ") is in two T-coupling groups, ",
               tc.names[tc.group_of_atom[a]], " and ", tc.names[g], "; each atom must be in exactly one");
      tc.group_of_atom[a] = static_cast<int>(g);
    }
  }
  const auto missing = std::count(tc.group_of_atom.begin(), tc.group_of_atom.end(), -1);
  if (missing > 0) {
    const int first = static_cast<int>(std::find(tc.group_of_atom.begin(), tc.group_of_atom.end(), -1) -
                                       tc.group_of_atom.begin());
    QK_THROW(ValueError, mdp.source, ": ", missing, " atom(s) are in no T-coupling group (the first: atom ",
             first + 1, ", ", top.atom_name[first], " of residue ", top.residue_name[first], " ",
             top.residue_number[first], "); name groups that cover the system once, e.g. tc-grps = Protein "
             "Non-Protein or System");
  }
  // Degrees of freedom in half units per atom, as grompp.
  std::vector<int> dof2(n, 0);
  for (int a = 0; a < n; ++a) dof2[a] = top.mass[a] > 0 ? 6 : 0;
  for (const BondConstraint& c : constraints) {
    const int imin = std::min(dof2[c.j] > 0 ? 1 : 2, dof2[c.i]);
    const int jmin = std::min(dof2[c.i] > 0 ? 1 : 2, dof2[c.j]);
    dof2[c.i] -= imin;
    dof2[c.j] -= jmin;
  }
  for (const Settle& s : top.settles)
    for (int k = 0; k < 3; ++k) dof2[s.ow + k] -= std::min(2, dof2[s.ow + k]);
  tc.ndf.assign(ng, 0);
  double total = 0;
  for (int a = 0; a < n; ++a) {
    tc.ndf[tc.group_of_atom[a]] += 0.5 * dof2[a];
    total += 0.5 * dof2[a];
  }
  // Centre-of-mass motion removal takes its 3 degrees from every group in proportion (one COM group: System).
  if (mdp.comm_mode == CommMode::kLinear && mdp.nstcomm > 0 && total > 3)
    for (double& d : tc.ndf) d *= (total - 3) / total;
  return tc;
}

}  // namespace qk::md

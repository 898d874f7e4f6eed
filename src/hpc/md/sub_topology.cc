#include "sub_topology.h"

#include <algorithm>

namespace qk::md {

std::vector<int> local_indices(int num_atoms, const std::vector<int>& atoms) {
  std::vector<int> local(static_cast<size_t>(num_atoms), -1);
  for (size_t k = 0; k < atoms.size(); ++k) local[atoms[k]] = static_cast<int>(k);
  return local;
}

namespace {

// The interactions of `from` whose atoms (the members `members` names) are all selected, renumbered.
template <typename T, typename... Members>
void select(const std::vector<T>& from, const std::vector<int>& local, int limit, std::vector<T>* to,
            Members... members) {
  to->clear();
  for (const T& t : from) {
    if (((local[t.*members] < 0 || local[t.*members] >= limit) || ...)) continue;
    T c = t;
    ((c.*members = local[t.*members]), ...);
    to->push_back(c);
  }
}

}  // namespace

Topology select_atoms(const Topology& top, const std::vector<int>& atoms, const std::vector<int>& local,
                      int interacting) {
  Topology sub;
  sub.system_name = top.system_name;
  sub.nbfunc = top.nbfunc;
  sub.comb_rule = top.comb_rule;
  sub.gen_pairs = top.gen_pairs;
  sub.fudge_lj = top.fudge_lj;
  sub.fudge_qq = top.fudge_qq;
  // Only the atom types these atoms have (a force field defines hundreds, and the pair tables go as their
  // square), renumbered in order of first use.
  const size_t n = atoms.size();
  std::vector<int> new_type(top.atom_types.size(), -1), old_type;
  for (int a : atoms)
    if (new_type[top.type[a]] < 0) {
      new_type[top.type[a]] = static_cast<int>(old_type.size());
      old_type.push_back(top.type[a]);
    }
  const size_t nt = old_type.size();
  sub.pair_c6.resize(nt * nt);
  sub.pair_c12.resize(nt * nt);
  for (size_t i = 0; i < nt; ++i) {
    sub.atom_types.push_back(top.atom_types[old_type[i]]);
    for (size_t j = 0; j < nt; ++j) {
      sub.pair_c6[i * nt + j] = top.c6(old_type[i], old_type[j]);
      sub.pair_c12[i * nt + j] = top.c12(old_type[i], old_type[j]);
    }
  }
  sub.type.resize(n);
  sub.charge.resize(n);
  sub.mass.resize(n);
  sub.atom_name.resize(n);
  sub.residue_name.resize(n);
  sub.residue_number.resize(n);
  sub.exclusions.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const int a = atoms[k];
    sub.type[k] = new_type[top.type[a]];
    sub.charge[k] = top.charge[a];
    sub.mass[k] = top.mass[a];
    sub.atom_name[k] = top.atom_name[a];
    sub.residue_name[k] = top.residue_name[a];
    sub.residue_number[k] = top.residue_number[a];
    if (static_cast<int>(k) < interacting)
      for (int b : top.exclusions[a])
        if (local[b] >= 0 && local[b] < interacting) sub.exclusions[k].push_back(local[b]);
    std::sort(sub.exclusions[k].begin(), sub.exclusions[k].end());
  }
  select(top.bonds, local, interacting, &sub.bonds, &HarmonicBond::i, &HarmonicBond::j);
  select(top.angles, local, interacting, &sub.angles, &HarmonicAngle::i, &HarmonicAngle::j, &HarmonicAngle::k);
  select(top.pairs, local, interacting, &sub.pairs, &LjPair::i, &LjPair::j);
  select(top.dihedrals, local, interacting, &sub.dihedrals, &Dihedral::i, &Dihedral::j, &Dihedral::k, &Dihedral::l);
  select(top.settles, local, interacting, &sub.settles, &Settle::ow);
  // A SETTLE names its oxygen; its hydrogens follow it, so all three must be selected.
  std::erase_if(sub.settles, [&](const Settle& s) {
    return s.ow + 2 >= std::min(static_cast<int>(n), interacting) || atoms[s.ow + 1] != atoms[s.ow] + 1 || atoms[s.ow + 2] != atoms[s.ow] + 2;
  });
  select(top.vsites3, local, interacting, &sub.vsites3, &VirtualSite3::site, &VirtualSite3::i, &VirtualSite3::j, &VirtualSite3::k);
  select(top.posres, local, interacting, &sub.posres, &PositionRestraint::atom);
  select(top.constraints, local, interacting, &sub.constraints, &Topology::FixedDistance::i, &Topology::FixedDistance::j);
  sub.molecules.push_back(Topology::MoleculeBlock{"selection", 1, static_cast<int>(n)});
  return sub;
}

std::vector<BondConstraint> select_constraints(const std::vector<BondConstraint>& constraints,
                                               const std::vector<int>& local) {
  std::vector<BondConstraint> out;
  select(constraints, local, INT32_MAX, &out, &BondConstraint::i, &BondConstraint::j);
  return out;
}

}  // namespace qk::md

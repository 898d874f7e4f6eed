// The atoms md::run integrates on this rank: every atom, or a domain's home
// atoms (domain_decomposition.h), with what the update needs of them (masses,
// T-coupling groups, SETTLE and LINCS on their molecules), the sums over the
// ranks of what they contribute (kinetic energy, constraint virial, momentum),
// and every atom's values gathered for the outputs.
#pragma once

#include <memory>
#include <vector>

#include "domain_decomposition.h"
#include "lincs.h"
#include "settle.h"

namespace qk::md {

class RunAtoms {
 public:
  // Every atom of `top` (the run's topology, constraints from lincs_constraints, each atom's T-coupling group).
  RunAtoms(const Topology& top, const std::vector<BondConstraint>& constraints, const std::vector<int>& group_of_atom);
  // From now on dd's home atoms, as it partitioned them last (call after each partition).
  void take_home(DomainDecomposition* dd);
  // Every atom again (the domains given up).
  void take_all();

  const Topology& top() const { return *top_; }
  const SettleConstraints& settle() const { return *settle_; }
  const Lincs& lincs() const { return *lincs_; }
  const std::vector<int>& group_of_atom() const { return group_; }
  const std::vector<double>& inv_mass() const { return inv_mass_; }
  // Values over these atoms added up over the ranks, in place, the same bits on every rank (alone: as they are).
  void sum(double* data, int64_t count) const;
  // Every atom's values (num_atoms of the run) from these atoms' (alone: a copy).
  std::vector<Vec3> everyone(const std::vector<Vec3>& mine) const;
  // These atoms' entries of an every-atom vector.
  std::vector<Vec3> mine(const std::vector<Vec3>& everyone) const;

 private:
  const Topology& run_top_;
  const std::vector<BondConstraint>& constraints_;
  const std::vector<int>& run_group_;
  DomainDecomposition* dd_ = nullptr;
  std::unique_ptr<Topology> home_top_;
  const Topology* top_;
  std::unique_ptr<SettleConstraints> settle_;
  std::unique_ptr<Lincs> lincs_;
  std::vector<int> group_;
  std::vector<double> inv_mass_;
};

}  // namespace qk::md

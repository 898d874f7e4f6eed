#include "run_atoms.h"

#include "sub_topology.h"

namespace qk::md {
namespace {

std::vector<double> inverse_masses(const std::vector<double>& mass) {
  std::vector<double> inv(mass.size());
  for (size_t i = 0; i < mass.size(); ++i) inv[i] = mass[i] > 0 ? 1 / mass[i] : 0;
  return inv;
}

}  // namespace

RunAtoms::RunAtoms(const Topology& top, const std::vector<BondConstraint>& constraints,
                   const std::vector<int>& group_of_atom)
    : run_top_(top),
      constraints_(constraints),
      run_group_(group_of_atom),
      top_(&top),
      settle_(std::make_unique<SettleConstraints>(top)),
      lincs_(std::make_unique<Lincs>(top, constraints)),
      group_(group_of_atom),
      inv_mass_(inverse_masses(top.mass)) {}

void RunAtoms::take_home(DomainDecomposition* dd) {
  dd_ = dd;
  const std::vector<int>& home = dd->home();
  const std::vector<int> local = local_indices(run_top_.num_atoms(), home);
  home_top_ = std::make_unique<Topology>(select_atoms(run_top_, home, local));
  top_ = home_top_.get();
  settle_ = std::make_unique<SettleConstraints>(*top_);
  lincs_ = std::make_unique<Lincs>(*top_, select_constraints(constraints_, local));
  group_.resize(home.size());
  for (size_t k = 0; k < home.size(); ++k) group_[k] = run_group_[home[k]];
  inv_mass_ = inverse_masses(top_->mass);
}

void RunAtoms::take_all() {
  dd_ = nullptr;
  home_top_.reset();
  top_ = &run_top_;
  settle_ = std::make_unique<SettleConstraints>(run_top_);
  lincs_ = std::make_unique<Lincs>(run_top_, constraints_);
  group_ = run_group_;
  inv_mass_ = inverse_masses(run_top_.mass);
}

void RunAtoms::sum(double* data, int64_t count) const {
  if (!dd_) return;
  const ForceShare& share = dd_->share();
  share.allreduce_sum(data, count);
  if (share.broadcast_first) share.broadcast_first(data, count);
}

std::vector<Vec3> RunAtoms::everyone(const std::vector<Vec3>& mine) const {
  if (!dd_) return mine;
  std::vector<Vec3> all;
  dd_->gather(mine, &all);
  return all;
}

std::vector<Vec3> RunAtoms::mine(const std::vector<Vec3>& everyone) const {
  if (!dd_) return everyone;
  std::vector<Vec3> out(dd_->home().size());
  for (size_t k = 0; k < out.size(); ++k) out[k] = everyone[dd_->home()[k]];
  return out;
}

}  // namespace qk::md

#include "position_restraints.h"

#include "qk/base/error.h"

namespace qk::md {

PositionRestraints::PositionRestraints(const Topology& top, const std::vector<Vec3>& reference, const Vec3& box,
                                       RefCoordScaling mode)
    : mode_(mode) {
  QK_CHECK(static_cast<int>(reference.size()) == top.num_atoms(), "the position restraints' reference has ",
           reference.size(), " atoms, the topology ", top.num_atoms());
  Vec3 sum{0, 0, 0};
  double mass = 0;
  std::vector<char> seen(reference.size(), 0);
  for (const PositionRestraint& r : top.posres) {
    atoms_.push_back(r.atom);
    k_.push_back(r.k);
    ref_.push_back(reference[r.atom]);
    if (!seen[r.atom]) {  // each atom's mass once, as grompp
      seen[r.atom] = 1;
      for (int d = 0; d < 3; ++d) sum[d] += top.mass[r.atom] * reference[r.atom][d];
      mass += top.mass[r.atom];
    }
  }
  if (mode_ == RefCoordScaling::kCom && !atoms_.empty()) {
    QK_CHECK(mass > 0, "the position-restrained atoms have no mass: refcoord-scaling = com needs their centre");
    for (int d = 0; d < 3; ++d) com_box_[d] = sum[d] / mass / box[d];
    for (Vec3& r : ref_)
      for (int d = 0; d < 3; ++d) r[d] -= com_box_[d] * box[d];
  }
}

PositionRestraints PositionRestraints::select(const std::vector<int>& local) const {
  PositionRestraints out = *this;
  out.atoms_.clear();
  out.k_.clear();
  out.ref_.clear();
  for (size_t k = 0; k < atoms_.size(); ++k)
    if (local[atoms_[k]] >= 0) {
      out.atoms_.push_back(local[atoms_[k]]);
      out.k_.push_back(k_[k]);
      out.ref_.push_back(ref_[k]);
    }
  return out;
}

double PositionRestraints::apply(const std::vector<Vec3>& x, const RectBox& box, std::vector<Vec3>* f,
                                 Mat3* virial) const {
  double energy = 0;
  Vec3 vir{0, 0, 0};
  for (size_t n = 0; n < atoms_.size(); ++n) {
    const int a = atoms_[n];
    Vec3 pos;
    for (int d = 0; d < 3; ++d) pos[d] = ref_[n][d] + (mode_ == RefCoordScaling::kCom ? com_box_[d] * box.length[d] : 0);
    const Vec3 dx = box.delta(x[a], pos);
    for (int d = 0; d < 3; ++d) {
      const double fm = -k_[n][d] * dx[d];
      energy += 0.5 * k_[n][d] * dx[d] * dx[d];
      (*f)[a][d] += fm;
      vir[d] -= 0.5 * (dx[d] + ref_[n][d]) * fm;
    }
  }
  for (int d = 0; d < 3; ++d) (*virial)[d][d] += vir[d];
  return energy;
}

}  // namespace qk::md

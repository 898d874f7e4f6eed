#include "lincs.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "qk/base/error.h"

namespace qk::md {

std::vector<BondConstraint> h_bond_constraints(const Topology& top) {
  auto is_h = [&](int a) { return std::toupper(static_cast<unsigned char>(top.atom_name[a][0])) == 'H'; };
  std::vector<BondConstraint> out;
  for (const HarmonicBond& b : top.bonds)
    if (is_h(b.i) || is_h(b.j)) out.push_back(BondConstraint{b.i, b.j, b.b0});
  return out;
}

std::vector<BondConstraint> bond_constraints(const Topology& top, const MdpOptions& mdp) {
  switch (mdp.constraints) {
    case Constraints::kNone: return {};
    case Constraints::kHBonds: return h_bond_constraints(top);
    case Constraints::kAllBonds: break;
  }
  std::vector<BondConstraint> out;
  for (const HarmonicBond& b : top.bonds) out.push_back(BondConstraint{b.i, b.j, b.b0});
  return out;
}

std::vector<BondConstraint> lincs_constraints(const Topology& top, const MdpOptions& mdp) {
  std::vector<BondConstraint> out = bond_constraints(top, mdp);
  for (const Topology::FixedDistance& c : top.constraints) out.push_back(BondConstraint{c.i, c.j, c.length});
  return out;
}

Topology without_bonds(const Topology& top, const std::vector<BondConstraint>& constrained) {
  Topology t = top;
  t.bonds.clear();
  size_t k = 0;
  for (const HarmonicBond& b : top.bonds) {
    // bond_constraints keeps the bonds' order, so one pass finds them.
    if (k < constrained.size() && constrained[k].i == b.i && constrained[k].j == b.j) {
      ++k;
      continue;
    }
    t.bonds.push_back(b);
  }
  QK_CHECK(k == constrained.size(), "without_bonds: ", constrained.size() - k,
           " constraints are not bonds of the topology");
  return t;
}

Lincs::Lincs(const Topology& top, std::vector<BondConstraint> constraints, int order, int iterations)
    : c_(std::move(constraints)), order_(order), iterations_(iterations) {
  const int n = top.num_atoms(), nc = static_cast<int>(c_.size());
  invmass_.resize(n);
  for (int a = 0; a < n; ++a) invmass_[a] = top.mass[a] > 0 ? 1 / top.mass[a] : 0;
  blc_.resize(nc);
  for (int b = 0; b < nc; ++b) {
    const double w = invmass_[c_[b].i] + invmass_[c_[b].j];
    QK_CHECK(w > 0, "LINCS: constraint ", c_[b].i + 1, "-", c_[b].j + 1, " joins two massless atoms");
    blc_[b] = 1 / std::sqrt(w);
  }
  // The constraints at each atom, then each constraint's neighbours through its two atoms (GROMACS's
  // set_lincs_matrix: sign -1 where the shared atom is at the same end of both, center = the shared atom).
  std::vector<std::vector<int>> at(n);
  for (int b = 0; b < nc; ++b) {
    at[c_[b].i].push_back(b);
    at[c_[b].j].push_back(b);
  }
  coupled_begin_.assign(nc + 1, 0);
  for (int b = 0; b < nc; ++b) {
    for (int end = 0; end < 2; ++end) {
      const int center = end == 0 ? c_[b].i : c_[b].j;
      for (int k : at[center]) {
        if (k == b) continue;
        const double sign = (c_[b].i == c_[k].i || c_[b].j == c_[k].j) ? -1.0 : 1.0;
        coupled_.push_back(k);
        coupling_coef_.push_back(sign * invmass_[center] * blc_[b] * blc_[k]);
      }
    }
    coupled_begin_[b + 1] = static_cast<int>(coupled_.size());
  }
}

bool Lincs::apply(const RectBox& box, const std::vector<Vec3>& x, std::vector<Vec3>* xprime, std::vector<Vec3>* v,
                  double invdt, Mat3* r_m_dx) const {
  const int nc = static_cast<int>(c_.size());
  if (nc == 0) return true;
  std::vector<Vec3>& xp = *xprime;
  std::vector<Vec3> r(nc);
  for (int b = 0; b < nc; ++b) {
    const Vec3 d = box.delta(x[c_[b].i], x[c_[b].j]);
    const double inv = 1 / std::sqrt(dot(d, d));
    r[b] = {d[0] * inv, d[1] * inv, d[2] * inv};
  }
  std::vector<double> blcc(coupled_.size());
  for (int b = 0; b < nc; ++b)
    for (int n = coupled_begin_[b]; n < coupled_begin_[b + 1]; ++n)
      blcc[n] = coupling_coef_[n] * dot(r[b], r[coupled_[n]]);
  std::vector<double> rhs(nc), rhs2(nc), sol(nc), mlambda(nc, 0.0);
  // sol = (I + A + ... + A^order) rhs, then the atoms move by blc sol along r.
  auto solve_and_move = [&]() {
    sol = rhs;
    for (int rec = 0; rec < order_; ++rec) {
      for (int b = 0; b < nc; ++b) {
        double s = 0;
        for (int n = coupled_begin_[b]; n < coupled_begin_[b + 1]; ++n) s += blcc[n] * rhs[coupled_[n]];
        rhs2[b] = s;
        sol[b] += s;
      }
      std::swap(rhs, rhs2);
    }
    for (int b = 0; b < nc; ++b) {
      const double mvb = blc_[b] * sol[b];
      mlambda[b] += mvb;
      const int i = c_[b].i, j = c_[b].j;
      for (int d = 0; d < 3; ++d) {
        xp[i][d] -= mvb * invmass_[i] * r[b][d];
        xp[j][d] += mvb * invmass_[j] * r[b][d];
      }
    }
  };
  const std::vector<Vec3> xp0 = xp;
  for (int b = 0; b < nc; ++b) {
    const Vec3 d = box.delta(xp[c_[b].i], xp[c_[b].j]);
    rhs[b] = blc_[b] * (dot(r[b], d) - c_[b].length);
  }
  solve_and_move();
  bool ok = true;
  for (int it = 0; it < iterations_; ++it) {
    // Rotation lengthens the bonds: aim at the projection that leaves length d, sqrt(2 d^2 - l^2).
    for (int b = 0; b < nc; ++b) {
      const Vec3 d = box.delta(xp[c_[b].i], xp[c_[b].j]);
      const double len = c_[b].length, dlen2 = 2 * len * len - dot(d, d);
      if (dlen2 <= 0) ok = false;
      rhs[b] = blc_[b] * (len - (dlen2 > 0 ? std::sqrt(dlen2) : 0.0));
    }
    solve_and_move();
  }
  if (v != nullptr)
    for (size_t a = 0; a < xp.size(); ++a)
      for (int d = 0; d < 3; ++d) (*v)[a][d] += (xp[a][d] - xp0[a][d]) * invdt;
  if (r_m_dx != nullptr)
    for (int b = 0; b < nc; ++b) {
      // sum over the pair of r (x) m dx, with GROMACS's bond vector length x r: -length mlambda r (x) r.
      const double f = -c_[b].length * mlambda[b];
      for (int p = 0; p < 3; ++p)
        for (int q = 0; q < 3; ++q) (*r_m_dx)[p][q] += f * r[b][p] * r[b][q];
    }
  return ok;
}

double Lincs::rms_deviation(const RectBox& box, const std::vector<Vec3>& x) const {
  if (c_.empty()) return 0;
  return std::sqrt(squared_deviations(box, x) / static_cast<double>(c_.size()));
}

double Lincs::squared_deviations(const RectBox& box, const std::vector<Vec3>& x) const {
  double sum = 0;
  for (const BondConstraint& c : c_) {
    const Vec3 d = box.delta(x[c.i], x[c.j]);
    const double dev = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) / c.length - 1;
    sum += dev * dev;
  }
  return sum;
}

}  // namespace qk::md

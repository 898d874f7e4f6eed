#include "bonded.h"

#include <algorithm>
#include <cmath>

namespace qk::md {

BondedEnergies bonded_forces(const std::vector<Vec3>& x, const RectBox& box, const Topology& top, double epsilon_r,
                             std::vector<Vec3>* f) {
  BondedEnergies e;
  auto add_pair = [&](int i, int j, const Vec3& d, double fscal) {
    const Vec3 fij{fscal * d[0], fscal * d[1], fscal * d[2]};
    for (int c = 0; c < 3; ++c) {
      (*f)[i][c] += fij[c];
      (*f)[j][c] -= fij[c];
    }
    add_virial(&e.virial, d, fij);
  };
  for (const HarmonicBond& b : top.bonds) {
    const Vec3 d = box.delta(x[b.i], x[b.j]);
    const double r = std::sqrt(dot(d, d)), dr = r - b.b0;
    e.bond += 0.5 * b.kb * dr * dr;
    add_pair(b.i, b.j, d, -b.kb * dr / r);
  }
  for (const HarmonicAngle& a : top.angles) {
    // theta between r_ij = x_i - x_j and r_kj = x_k - x_j.
    const Vec3 rij = box.delta(x[a.i], x[a.j]), rkj = box.delta(x[a.k], x[a.j]);
    const double nij = std::sqrt(dot(rij, rij)), nkj = std::sqrt(dot(rkj, rkj));
    const double cos_t = std::clamp(dot(rij, rkj) / (nij * nkj), -1.0, 1.0);
    const double theta = std::acos(cos_t), dt = theta - a.theta0;
    e.angle += 0.5 * a.k_theta * dt * dt;
    // dV/dtheta, and dtheta/dx_i = -(r_kj/|r_kj| - cos r_ij/|r_ij|) / (|r_ij| sin).
    const double sin_t = std::max(std::sqrt(1 - cos_t * cos_t), 1e-12);
    const double dvdt = a.k_theta * dt;
    Vec3 fi, fk;
    for (int c = 0; c < 3; ++c) {
      fi[c] = dvdt * (rkj[c] / nkj - cos_t * rij[c] / nij) / (nij * sin_t);
      fk[c] = dvdt * (rij[c] / nij - cos_t * rkj[c] / nkj) / (nkj * sin_t);
      (*f)[a.i][c] += fi[c];
      (*f)[a.k][c] += fk[c];
      (*f)[a.j][c] -= fi[c] + fk[c];
    }
    add_virial(&e.virial, rij, fi);
    add_virial(&e.virial, rkj, fk);
  }
  const double fqq = top.fudge_qq * units::kCoulombFactor / epsilon_r;
  for (const LjPair& p : top.pairs) {
    const Vec3 d = box.delta(x[p.i], x[p.j]);
    const double r2 = dot(d, d), rinv2 = 1 / r2, rinv = std::sqrt(rinv2), rinv6 = rinv2 * rinv2 * rinv2;
    const double qq = fqq * top.charge[p.i] * top.charge[p.j];
    e.lj14 += p.c12 * rinv6 * rinv6 - p.c6 * rinv6;
    e.coulomb14 += qq * rinv;
    add_pair(p.i, p.j, d, (12 * p.c12 * rinv6 * rinv6 - 6 * p.c6 * rinv6) * rinv2 + qq * rinv * rinv2);
  }
  return e;
}

}  // namespace qk::md

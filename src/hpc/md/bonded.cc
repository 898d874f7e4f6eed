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
  for (const Dihedral& d : top.dihedrals) {
    // phi between the planes (i, j, k) and (j, k, l), signed as GROMACS's dih_angle: m = r_ij x r_kj,
    // n = r_kj x r_kl, phi = sign(r_ij . n) angle(m, n).
    const Vec3 rij = box.delta(x[d.i], x[d.j]), rkj = box.delta(x[d.k], x[d.j]), rkl = box.delta(x[d.k], x[d.l]);
    const Vec3 m = cross(rij, rkj), n = cross(rkj, rkl);
    const double mm = dot(m, m), nn = dot(n, n);
    if (mm < 1e-24 || nn < 1e-24) continue;  // three atoms on a line: no plane, no torque (as GROMACS's 0 force)
    const double cos_phi = std::clamp(dot(m, n) / std::sqrt(mm * nn), -1.0, 1.0);
    const double phi = (dot(rij, n) < 0 ? -1.0 : 1.0) * std::acos(cos_phi);
    double dvdphi = 0;
    switch (d.funct) {
      case 1:
      case 9:
      case 4: {
        const double a = d.multiplicity * phi - d.phi0;
        (d.funct == 4 ? e.periodic_improper_dih : e.proper_dih) += d.k_phi * (1 + std::cos(a));
        dvdphi = -d.k_phi * d.multiplicity * std::sin(a);
        break;
      }
      case 2: {
        double dp = phi - d.phi0;  // into [-pi, pi)
        dp -= 2 * units::kPi * std::floor((dp + units::kPi) / (2 * units::kPi));
        e.improper_dih += 0.5 * d.k_phi * dp * dp;
        dvdphi = d.k_phi * dp;
        break;
      }
      case 3: {
        // The polymer convention psi = phi - 180 deg: cos psi = -cos phi, sin psi = -sin phi.
        const double c = -std::cos(phi), sn = -std::sin(phi);
        double v = 0, dvdc = 0, ck = 1;  // ck = c^k
        for (size_t k = 0; k < 6; ++k) {
          v += d.rb[k] * ck;
          if (k < 5) dvdc += static_cast<double>(k + 1) * d.rb[k + 1] * ck;
          ck *= c;
        }
        e.rb_dih += v;
        dvdphi = -sn * dvdc;  // dc/dphi = -sin psi
        break;
      }
      default:
        break;
    }
    // GROMACS's do_dih_fup: the forces on i and l along the planes' normals, j and k by the lever rule.
    const double nkj2 = dot(rkj, rkj), nkj = std::sqrt(nkj2);
    const double a = -dvdphi * nkj / mm, b = dvdphi * nkj / nn;
    const double p = dot(rij, rkj) / nkj2, q = dot(rkl, rkj) / nkj2;
    Vec3 fi, fl, fj, fk;
    for (int c = 0; c < 3; ++c) {
      fi[c] = a * m[c];
      fl[c] = b * n[c];
      const double s = p * fi[c] - q * fl[c];
      fj[c] = fi[c] - s;  // the force on j is -fj
      fk[c] = fl[c] + s;  // on k, -fk
      (*f)[d.i][c] += fi[c];
      (*f)[d.j][c] -= fj[c];
      (*f)[d.k][c] -= fk[c];
      (*f)[d.l][c] += fl[c];
    }
    // -1/2 sum r (x) F with positions taken from j: r_ij, r_kj and r_lj = r_kj - r_kl.
    const Vec3 rlj{rkj[0] - rkl[0], rkj[1] - rkl[1], rkj[2] - rkl[2]};
    add_virial(&e.virial, rij, fi);
    add_virial(&e.virial, rkj, Vec3{-fk[0], -fk[1], -fk[2]});
    add_virial(&e.virial, rlj, fl);
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

// GROMACS 2022's Verlet buffer estimate and pair-list tuning (verlet_buffer.h),
// written from calc_verletbuf.cpp, pairlist_tuning.cpp and nbnxm_geometry.cpp
// for what qk md supports: plain cut-off LJ with the potential shift, PME
// or reaction-field Coulomb, SETTLE and h-bond constraints, leap-frog MD.
#include "verlet_buffer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "pme.h"
#include "qk/base/error.h"

namespace qk::md {

using units::kBoltz;
using units::kCoulombFactor;
using units::kPi;

namespace {

// What an atom's thermal displacement and its pair energies depend on.
struct KineticType {
  double mass = 0;
  int type = 0;
  double q = 0;
  bool constrained = false;
  double con_mass = 0, con_len = 0;  // the heaviest partner it is constrained to, and the length
  auto key() const { return std::tie(mass, type, q, constrained, con_mass, con_len); }
};

struct TypeCount {
  KineticType prop;
  double n = 0;
};

std::vector<TypeCount> kinetic_types(const Topology& top, const std::vector<BondConstraint>& constraints) {
  const int n = top.num_atoms();
  std::vector<KineticType> p(n);
  for (const BondConstraint& c : constraints) {
    if (c.length <= 0) continue;
    if (top.mass[c.j] > p[c.i].con_mass) p[c.i].con_mass = top.mass[c.j], p[c.i].con_len = c.length;
    if (top.mass[c.i] > p[c.j].con_mass) p[c.j].con_mass = top.mass[c.i], p[c.j].con_len = c.length;
  }
  for (const Settle& s : top.settles) {
    p[s.ow].con_mass = top.mass[s.ow + 1], p[s.ow].con_len = s.doh;
    p[s.ow + 1].con_mass = top.mass[s.ow], p[s.ow + 1].con_len = s.doh;
    p[s.ow + 2].con_mass = top.mass[s.ow], p[s.ow + 2].con_len = s.doh;
  }
  // A virtual site moves with its atoms: it gets the mass whose thermal displacement is the site's
  // (exact for the linear three-atom site).
  std::vector<double> mass = top.mass;
  for (const VirtualSite3& v : top.vsites3) {
    const double mi = top.mass[v.i], mj = top.mass[v.j], mk = top.mass[v.k], c = 1 - v.a - v.b;
    mass[v.site] = mi * mj * mk / (mj * mk * c * c + mi * mk * v.a * v.a + mi * mj * v.b * v.b);
  }
  std::vector<TypeCount> types;
  std::map<decltype(KineticType{}.key()), size_t> index;
  for (int a = 0; a < n; ++a) {
    if (mass[a] == 0) continue;  // massless particles that are not sites do not move on their own
    p[a].mass = mass[a];
    p[a].type = top.type[a];
    p[a].q = top.charge[a];
    // Two degrees of freedom when constrained to an atom of more than 0.4 times its mass.
    p[a].constrained = p[a].con_mass > 0.4 * p[a].mass;
    const auto [it, fresh] = index.emplace(p[a].key(), types.size());
    if (fresh) types.push_back({p[a], 0});
    types[it->second].n += 1;
  }
  return types;
}

// -V', V'' and -V''' at the cut-off.
struct Derivatives {
  double md1 = 0, d2 = 0, md3 = 0;
};

// The displacement variances of an atom over the list's lifetime: in 2-D
// (rotation about its constraint partner) and 3-D (its pair's centre of mass).
void atom_sigma2(double kt_fac, const KineticType& p, double* s2_2d, double* s2_3d) {
  if (!p.constrained) {
    *s2_2d = 0;
    *s2_3d = kt_fac / p.mass;
    return;
  }
  const double mass_fraction = p.con_mass / (p.mass + p.con_mass);
  const double sigma2_rot = kt_fac * mass_fraction / p.mass;
  const double com_distance = p.con_len * mass_fraction;
  // The mean square arc relative to the arm, a rational overestimate that is constant past 1/sqrt(b).
  constexpr double a = 1.0 / 3.0, b = 2.0 / 45.0;
  const double sigma2_rel = std::min(sigma2_rot / (com_distance * com_distance), 1 / std::sqrt(b));
  *s2_2d = com_distance * com_distance * sigma2_rel / (1 + a * sigma2_rel + b * sigma2_rel * sigma2_rel);
  *s2_3d = kt_fac / (p.mass + p.con_mass);
}

// A 2-D displacement distribution as a scaled, shifted Gaussian matched at x.
void approx_2dof(double s2, double x, double* shift, double* scale) {
  const double ex = std::exp(-x * x / (2 * s2));
  const double er = std::erfc(x / std::sqrt(2 * s2));
  *shift = -x + std::sqrt(2 * s2 / kPi) * ex / er;
  *scale = 0.5 * kPi * std::exp(ex * ex / (kPi * er * er)) * er;
}

// The energy drift of one atom pair (energy x length: the line density is applied by the caller).
double pair_drift(bool constrained_i, bool constrained_j, double s2, double s2i_2d, double s2j_2d, double r_buffer,
                  const Derivatives& der) {
  constexpr double kErfcArgMax = 8.0;  // erfc(8) = 1e-29: nothing left to add
  double rsh = r_buffer, sc_fac = 1, c_exp = 0, c_erfc = 0;
  if (rsh * rsh <= 2 * s2 * kErfcArgMax * kErfcArgMax) {
    if (constrained_i) {
      double sh = 0, sc = 0;
      approx_2dof(s2i_2d, r_buffer * s2i_2d / s2, &sh, &sc);
      rsh += sh, sc_fac *= sc;
    }
    if (constrained_j) {
      double sh = 0, sc = 0;
      approx_2dof(s2j_2d, r_buffer * s2j_2d / s2, &sh, &sc);
      rsh += sh, sc_fac *= sc;
    }
    c_exp = std::exp(-rsh * rsh / (2 * s2)) / std::sqrt(2 * kPi);
    c_erfc = 0.5 * std::erfc(rsh / std::sqrt(2 * s2));
  }
  const double s = std::sqrt(s2), rsh2 = rsh * rsh;
  const double pot1 = sc_fac * der.md1 / 2 * ((rsh2 + s2) * c_erfc - rsh * s * c_exp);
  const double pot2 = sc_fac * der.d2 / 6 * (s * (rsh2 + 2 * s2) * c_exp - rsh * (rsh2 + 3 * s2) * c_erfc);
  const double pot3 = sc_fac * der.md3 / 24 *
                      ((rsh2 * rsh2 + 6 * rsh2 * s2 + 3 * s2 * s2) * c_erfc - rsh * s * (rsh2 + 5 * s2) * c_exp);
  return pot1 + pot2 + pot3;
}

// The system's drift with a list radius rlist, summed unsigned over type pairs.
double system_drift(const std::vector<TypeCount>& types, const Topology& top, double kt_fac, const Derivatives& lj_disp,
                    const Derivatives& lj_rep, const Derivatives& elec, double rvdw, double rcoulomb, double rlist,
                    double volume) {
  if (kt_fac == 0) return 0;
  double total = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    const KineticType& pi = types[i].prop;
    double s2i_2d = 0, s2i_3d = 0;
    atom_sigma2(kt_fac, pi, &s2i_2d, &s2i_3d);
    for (size_t j = i; j < types.size(); ++j) {
      const KineticType& pj = types[j].prop;
      double s2j_2d = 0, s2j_3d = 0;
      atom_sigma2(kt_fac, pj, &s2j_2d, &s2j_3d);
      const double s2 = s2i_2d + s2i_3d + s2j_2d + s2j_3d;
      const double c6 = top.c6(pi.type, pj.type), c12 = top.c12(pi.type, pj.type);
      const Derivatives lj{c6 * lj_disp.md1 + c12 * lj_rep.md1, c6 * lj_disp.d2 + c12 * lj_rep.d2,
                           c6 * lj_disp.md3 + c12 * lj_rep.md3};
      const Derivatives qq{elec.md1 * pi.q * pj.q, elec.d2 * pi.q * pj.q, 0};
      double pot = pair_drift(pi.constrained, pj.constrained, s2, s2i_2d, s2j_2d, rlist - rvdw, lj) +
                   pair_drift(pi.constrained, pj.constrained, s2, s2i_2d, s2j_2d, rlist - rcoulomb, qq);
      pot *= j == i ? types[i].n * (types[i].n - 1) / 2 : types[i].n * types[j].n;
      // The line density: the effective r^2 is close to (rlist + sigma)^2.
      pot *= 4 * kPi * (rlist + std::sqrt(s2)) * (rlist + std::sqrt(s2)) / volume;
      total += std::abs(pot);
    }
  }
  return total;
}

// The chance that an atom of a cluster at distance rlist is itself at rlist
// (a cluster list misses fewer pairs than an atom list just past rlist).
double surface_fraction(int cluster_size, double particle_distance, double rlist) {
  if (rlist < 0.5 * particle_distance) return 1.0;
  const double d = 0.5 * particle_distance / rlist;
  double area_rel = 1.0;
  switch (cluster_size) {
    case 1: area_rel = 1.0; break;
    case 2: area_rel = 1.0 + d; break;
    case 4:  // a symmetric tetrahedron, by a Taylor expansion
      area_rel = 1.0 + 1 / kPi *
                           (6 * std::acos(1 / std::sqrt(3.0)) * d +
                            std::sqrt(3.0) * d * d *
                                (1.0 + 5.0 / 18.0 * d * d + 7.0 / 45.0 * std::pow(d, 4) + 83.0 / 756.0 * std::pow(d, 6)));
      break;
    default: QK_THROW(ValueError, "the Verlet buffer estimate knows clusters of 1, 2 and 4 atoms, not ", cluster_size);
  }
  return area_rel / cluster_size;
}

// How much a cluster list's effective radius exceeds rlist (GROMACS's nbnxn_get_rlist_effective_inc).
double effective_rlist_increase(int j_cluster, double atom_density) {
  constexpr int kICluster = 4;
  return 0.6 * std::cbrt((kICluster - 1) / atom_density + (j_cluster - 1) / atom_density);
}

}  // namespace

double verlet_buffer_rlist(const Topology& top, const std::vector<BondConstraint>& constraints, const MdpOptions& mdp,
                           double box_volume, double temperature, int nstlist, int lifetime, ListClusters clusters) {
  QK_CHECK(mdp.verlet_buffer_tolerance > 0, mdp.source, ": the Verlet buffer estimate needs verlet-buffer-tolerance > 0");
  const int natoms = top.num_atoms();
  const double particle_distance = std::cbrt(box_volume * std::sqrt(2.0) / natoms);  // HCP: the largest
  const std::vector<TypeCount> types = kinetic_types(top, constraints);
  QK_CHECK(!types.empty(), "the Verlet buffer estimate: no atom has a mass");
  // LJ with the potential shift: -V' of -r^-6 and r^-12 (higher derivatives are negligible).
  Derivatives lj_disp, lj_rep;
  lj_disp.md1 = -6 * std::pow(mdp.rvdw, -7.0);
  lj_rep.md1 = 12 * std::pow(mdp.rvdw, -13.0);
  const double elfac = kCoulombFactor / mdp.epsilon_r, rc = mdp.rcoulomb;
  Derivatives elec;
  if (mdp.coulomb_type == CoulombType::kPme) {
    const double b = ewald_coefficient(rc, mdp.ewald_rtol), br = b * rc;
    const double two_over_sqrt_pi = 2 / std::sqrt(kPi);
    elec.md1 = elfac * (b * std::exp(-br * br) * two_over_sqrt_pi / rc + std::erfc(br) / (rc * rc));
    elec.d2 = elfac / (rc * rc) *
              (2 * b * (1 + br * br) * std::exp(-br * br) * two_over_sqrt_pi + 2 * std::erfc(br) / rc);
  } else {
    const double eps_rf = mdp.epsilon_rf / mdp.epsilon_r;
    const double k_rf = eps_rf != 0 ? (eps_rf - mdp.epsilon_r) / (rc * rc * rc * (2 * eps_rf + mdp.epsilon_r))
                                    : 0.5 / (rc * rc * rc);
    if (eps_rf > 0) elec.md1 = elfac * (1.0 / (rc * rc) - 2 * k_rf * rc);
    elec.d2 = elfac * (2.0 / (rc * rc * rc) + 2 * k_rf);
  }
  const double t = lifetime * mdp.dt;
  const double kt_fac = kBoltz * temperature * t * t;
  double smallest_mass = types[0].prop.mass;
  for (const TypeCount& tc : types) smallest_mass = std::min(smallest_mass, tc.prop.mass);
  const double max_sigma = 2 * std::sqrt(kt_fac / smallest_mass);
  // Bisection over buffers in steps of 0.001 nm; the drift is negligible at 5 sigma.
  constexpr double kResolution = 0.001;
  const double cutoff = std::max(mdp.rvdw, mdp.rcoulomb);
  int ib0 = -1, ib1 = static_cast<int>(5 * max_sigma / kResolution) + 1;
  while (ib1 - ib0 > 1) {
    const int ib = (ib0 + ib1) / 2;
    const double rl = cutoff + ib * kResolution;
    double drift = system_drift(types, top, kt_fac, lj_disp, lj_rep, elec, mdp.rvdw, mdp.rcoulomb, rl, box_volume);
    drift *= surface_fraction(std::min(clusters.i, 4), particle_distance, rl) *
             surface_fraction(std::min(clusters.j, 4), particle_distance, rl);
    drift /= nstlist * mdp.dt * natoms;  // per unit time per atom
    (std::abs(drift) > mdp.verlet_buffer_tolerance ? ib0 : ib1) = ib;
  }
  return cutoff + ib1 * kResolution;
}

PairListSetup gromacs_pair_list_setup(const Topology& top, const std::vector<BondConstraint>& constraints,
                                      const MdpOptions& mdp, const Vec3& box, double temperature) {
  PairListSetup s;
  s.temperature = temperature;
  const double cutoff = std::max(mdp.rvdw, mdp.rcoulomb);
  const double max_rlist = 0.5 * std::min({box[0], box[1], box[2]});
  if (mdp.integrator != Integrator::kMd) {
    s.note = "energy minimization: the list is rebuilt when atoms may have closed its buffer";
    return s;
  }
  if (mdp.verlet_buffer_tolerance <= 0) {
    s.note = "verlet-buffer-tolerance = -1: the list is rebuilt when atoms may have closed its buffer (no pair is "
             "ever missed)";
    return s;
  }
  const double volume = box[0] * box[1] * box[2];
  const bool coupled = mdp.tcoupl != Thermostat::kNo;
  s.exact = false;
  s.nstlist = std::max(mdp.nstlist, 1);
  if (!coupled && temperature <= 0) {
    // As grompp: NVE from zero temperature gets a 10% buffer.
    s.rlist_outer = s.rlist_inner = 1.1 * cutoff;
    s.note = "NVE from zero temperature: a 10% buffer, as GROMACS";
  } else {
    s.rlist_outer = s.rlist_inner = verlet_buffer_rlist(top, constraints, mdp, volume, temperature, s.nstlist,
                                                        s.nstlist - 1);
  }
  if (coupled && s.nstlist > 1) {
    // mdrun's increaseNstlist: the largest of these intervals whose list is at most ~25% (and never more than
    // ~35%) larger than the list for nstlist = 10.
    constexpr int kTries[] = {20, 25, 40, 50, 80, 100};
    constexpr int kTryCount = sizeof kTries / sizeof kTries[0];
    int ind = 0;
    while (ind < kTryCount && s.nstlist >= kTries[ind]) ++ind;
    if (ind < kTryCount) {
      const double reference = verlet_buffer_rlist(top, constraints, mdp, volume, temperature, 10, 9);
      const double inc = effective_rlist_increase(4, top.num_atoms() / volume);
      const double rlist_ok = (reference + inc) * std::cbrt(1.25) - inc;
      const double rlist_max = (reference + inc) * std::cbrt(1.35) - inc;
      bool more = true;
      for (; more && ind < kTryCount; ++ind) {
        const double r = verlet_buffer_rlist(top, constraints, mdp, volume, temperature, kTries[ind], kTries[ind] - 1);
        more = r < max_rlist && r <= rlist_max;
        if (!more) break;
        s.nstlist = kTries[ind];
        s.rlist_outer = r;
        more = r < rlist_ok;
      }
    }
    // Dynamic pruning: the shortest interval from 4 steps that needs a buffer.
    int prune = 4;
    double inner = s.rlist_outer;
    for (;;) {
      inner = verlet_buffer_rlist(top, constraints, mdp, volume, temperature, prune, prune - 1);
      if (prune + 1 >= s.nstlist || inner != cutoff) break;
      ++prune;
    }
    const double inc = effective_rlist_increase(4, top.num_atoms() / volume);
    if (inner + inc < 0.99 * (s.rlist_outer + inc) && prune < s.nstlist - 1) {
      s.nstlist_prune = prune;
      s.rlist_inner = inner;
    }
  }
  if (s.rlist_outer >= max_rlist) {
    s = PairListSetup{};
    s.temperature = temperature;
    s.note = "the estimated list radius does not fit in half the box: the list is rebuilt when atoms may have "
             "closed its buffer instead";
    return s;
  }
  if (s.note.empty()) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "buffers for verlet-buffer-tolerance %g kJ/mol/ps per atom at %g K, as GROMACS",
                  mdp.verlet_buffer_tolerance, temperature);
    s.note = buf;
  }
  return s;
}

}  // namespace qk::md

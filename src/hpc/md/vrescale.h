// The V-rescale thermostat (Bussi, Donadio, Parrinello, J. Chem. Phys. 126,
// 014101 (2007)), as GROMACS's vrescale_tcoupl: on a coupling step the kinetic
// energy K is replaced by a draw from the canonical dynamics of eq. (A7),
//   K' = K + (1 - c)(sigma (R_1^2 + sum_{i=2}^{Nf} R_i^2) / Nf - K) + 2 R_1 sqrt(K sigma c (1 - c) / Nf),
// c = exp(-dt_couple / tau_t), sigma = Nf kB T_ref / 2, and velocities are
// scaled by lambda = sqrt(K' / K). `integral` accumulates -(K' - K), which
// keeps the conserved energy (total + integral) constant.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace qk::md {

class VRescale {
 public:
  VRescale(double ref_t, double tau_t, double coupling_dt, double ndf, uint64_t seed);
  // The velocity scale factor for kinetic energy `kinetic` (kJ/mol).
  double lambda(double kinetic);
  double integral() const { return integral_; }
  // The generator's state and the integral as text, and back (checkpoints: a resumed run draws the same).
  std::string save() const;
  void restore(const std::string& state);

 private:
  double ref_t_, tau_t_, coupling_dt_, ndf_;
  double integral_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace qk::md

#include "vrescale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qk/base/error.h"

#include "qk/hpc/md/units.h"

namespace qk::md {

VRescale::VRescale(double ref_t, double tau_t, double coupling_dt, double ndf, uint64_t seed)
    : ref_t_(ref_t), tau_t_(tau_t), coupling_dt_(coupling_dt), ndf_(ndf), rng_(seed) {}

double VRescale::lambda(double kinetic) {
  if (kinetic <= 0 || ndf_ <= 0) return 1.0;
  const double sigma = 0.5 * ndf_ * units::kBoltz * ref_t_;
  const double taut = tau_t_ / coupling_dt_;  // in units of coupling intervals
  const double c = taut > 0.1 ? std::exp(-1.0 / taut) : 0.0;
  std::normal_distribution<double> normal(0.0, 1.0);
  const double r1 = normal(rng_);
  // The sum of ndf - 1 squared normal deviates: chi-squared, i.e. 2 Gamma((ndf - 1) / 2).
  double sum_noises = 0;
  if (ndf_ - 1 > 0) sum_noises = 2 * std::gamma_distribution<double>(0.5 * (ndf_ - 1), 1.0)(rng_);
  const double k_new = kinetic + (1 - c) * (sigma * (sum_noises + r1 * r1) / ndf_ - kinetic) +
                       2 * r1 * std::sqrt(kinetic * sigma / ndf_ * (1 - c) * c);
  integral_ -= k_new - kinetic;
  return std::sqrt(std::max(k_new, 0.0) / kinetic);
}

std::string VRescale::save() const {
  std::ostringstream out;
  char integral[64];
  std::snprintf(integral, sizeof integral, "%a", integral_);
  out << integral << ' ' << rng_;
  return out.str();
}

void VRescale::restore(const std::string& state) {
  std::istringstream in(state);
  std::string integral;
  in >> integral >> rng_;
  QK_CHECK(!in.fail() && !integral.empty(), "V-rescale: the checkpoint's thermostat state does not parse");
  integral_ = std::strtod(integral.c_str(), nullptr);
}

}  // namespace qk::md

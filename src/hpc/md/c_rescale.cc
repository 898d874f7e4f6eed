#include "c_rescale.h"

#include <cmath>
#include <random>

#include "qk/hpc/md/units.h"

namespace qk::md {

double c_rescale_factor(const MdpOptions& mdp, double coupling_dt, double pressure, double volume, double kt,
                        uint64_t seed, int64_t step) {
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull));
  std::normal_distribution<double> normal(0.0, 1.0);
  const double gauss = normal(rng);
  const double factor = mdp.compressibility * coupling_dt / mdp.tau_p;
  return std::exp(-factor * (mdp.ref_p - pressure) / 3 +
                  std::sqrt(2.0 * std::max(kt, 0.0) * factor * units::kPresFac / volume) * gauss / 3);
}

}  // namespace qk::md

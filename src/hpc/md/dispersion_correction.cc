#include "dispersion_correction.h"

#include <cmath>
#include <cstdint>

namespace qk::md {

DispersionCorrection::DispersionCorrection(const Topology& top, DispCorr kind, double rvdw)
    : kind_(kind), natoms_(top.num_atoms()) {
  if (kind_ == DispCorr::kNo) return;
  // Average C6 over pairs of atoms, counted by type to avoid N^2 work, less the excluded pairs.
  const int nt = top.num_types();
  std::vector<int64_t> count(nt, 0);
  for (int t : top.type) ++count[t];
  double csix = 0;
  int64_t npair = 0, nexcl = 0;
  for (int a = 0; a < nt; ++a)
    for (int b = a; b < nt; ++b) {
      const int64_t n = a == b ? count[a] * (count[a] - 1) / 2 : count[a] * count[b];
      csix += static_cast<double>(n) * top.c6(a, b);
      npair += n;
    }
  for (int i = 0; i < natoms_; ++i)
    for (int k : top.exclusions[i])
      if (k > i) {
        csix -= top.c6(top.type[i], top.type[k]);
        ++nexcl;
      }
  avg_c6_ = npair - nexcl > 0 ? csix / static_cast<double>(npair - nexcl) : 0;
  const double rc3 = rvdw * rvdw * rvdw;
  enershift6_ = -1.0 / (rc3 * rc3);
  enerdiff6_ = 4.0 * units::kPi * enershift6_ * rc3 / 3.0 - 4.0 * units::kPi / (3.0 * rc3);
  virdiff6_ = 0.5 * 8.0 * units::kPi / rc3;  // the 0.5 of GROMACS's virial definition
}

DispersionCorrection::Result DispersionCorrection::compute(double volume) const {
  Result r;
  if (kind_ == DispCorr::kNo) return r;
  const double density = natoms_ / volume, ncorr = 0.5 * natoms_;
  r.energy = avg_c6_ * ncorr * (density * enerdiff6_ - enershift6_);
  if (kind_ == DispCorr::kEnerPres) {
    r.virial = ncorr * density * avg_c6_ * virdiff6_ / 3.0;
    r.pressure = -2.0 / volume * r.virial * units::kPresFac;
  }
  return r;
}

}  // namespace qk::md

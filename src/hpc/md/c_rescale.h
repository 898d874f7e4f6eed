// The C-rescale barostat (Bernetti and Bussi, J. Chem. Phys. 153, 114107
// (2020)), isotropic, as GROMACS 2022's coupling.cpp: every coupling step
// the box and the positions scale by
//   mu = exp(-beta dt / (3 tau_p) (P_ref - P) + sqrt(2 kT beta dt PRESFAC / (V tau_p)) R / 3)
// and the velocities by 1 / mu (beta: the compressibility, dt: the coupling
// interval, R: a standard normal). The draw depends only on the seed and
// the step, so a resumed run draws what the run that never stopped drew.
#pragma once

#include <cstdint>

#include "qk/hpc/md/mdp.h"

namespace qk::md {

// mu for a step whose pressure is `pressure` (bar) in a box of `volume` (nm^3), at kT = `kt` (kJ/mol; 0
// without a thermostat: then no noise, as GROMACS).
double c_rescale_factor(const MdpOptions& mdp, double coupling_dt, double pressure, double volume, double kt,
                        uint64_t seed, int64_t step);

}  // namespace qk::md

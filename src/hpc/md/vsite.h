// Virtual sites (GROMACS's [ virtual_sites3 ] funct 1, as TIP4P's charged M
// site): a massless particle at x_i + a (x_j - x_i) + b (x_k - x_i), built
// after every update from its atoms (nearest images, so a molecule split
// by the box is built whole) and carrying interactions only; its force is
// spread back onto them, F_i += (1 - a - b) F, F_j += a F, F_k += b F, and
// it is then zero. The site is a linear combination of its atoms, so the
// virial the force kernels sum with the site's own position and force is the
// virial of the spread forces: no correction is needed (GROMACS's linear
// case).
#pragma once

#include <vector>

#include "pbc.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

void construct_virtual_sites(const Topology& top, const RectBox& box, std::vector<Vec3>* x);
void spread_virtual_site_forces(const Topology& top, std::vector<Vec3>* f);
// The sites' velocities as their displacement over dt (the leap-frog's v(t + dt/2), as mdrun writes them).
void virtual_site_velocities(const Topology& top, const RectBox& box, const std::vector<Vec3>& x_old,
                             const std::vector<Vec3>& x_new, double dt, std::vector<Vec3>* v);

}  // namespace qk::md

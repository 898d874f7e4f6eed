// PME on a GPU (pme_gpu.h): the per-atom and per-k-point arithmetic in
// float, shared by the CUDA kernels (pme_cuda.cu) and their host emulation
// (pme_gpu.cc), as the CPU's Pme (pme.cc) does it: cardinal B-splines of
// order p (GROMACS's make_bsplines), the charge spread on the p^3 points from
// an atom's first grid point (periodic), the influence function and the
// energy and virial per k-point, the gradient gathered with the splines'
// derivatives.
#pragma once

#include <stddef.h>

#include "nonbonded_gpu_pair.h"  // QK_MD_HD

namespace qk::md::gpu {

inline constexpr int kPmeMaxOrder = 12;

struct PmeGrid {
  int nx = 0, ny = 0, nz = 0, order = 4;
  float inv[3] = {1, 1, 1};  // 1 / box length per dimension
  float fac = 0;             // pi^2 / beta^2
};

// Atom at fractional coordinate s in [0, 1) along a dimension of n points: its first grid point and the
// order p spline weights and derivatives of points first .. first + p - 1.
QK_MD_HD inline int pme_spline(float s, int n, int p, float* theta, float* dtheta) {
  const float u = s * static_cast<float>(n);
  int i = static_cast<int>(u);
  const float f = u - static_cast<float>(i);
  if (i >= n) i -= n;  // s rounded up to 1
  float* data = theta;
  data[p - 1] = 0;
  data[1] = f;
  data[0] = 1 - f;
  for (int k = 3; k < p; ++k) {
    const float div = 1.0f / static_cast<float>(k - 1);
    data[k - 1] = div * f * data[k - 2];
    for (int l = 1; l < k - 1; ++l)
      data[k - l - 1] = div * ((f + static_cast<float>(l)) * data[k - l - 2] + (static_cast<float>(k - l) - f) * data[k - l - 1]);
    data[0] = div * (1 - f) * data[0];
  }
  dtheta[0] = -data[0];
  for (int k = 1; k < p; ++k) dtheta[k] = data[k - 1] - data[k];
  const float div = 1.0f / static_cast<float>(p - 1);
  data[p - 1] = div * f * data[p - 2];
  for (int l = 1; l < p - 1; ++l)
    data[p - l - 1] = div * ((f + static_cast<float>(l)) * data[p - l - 2] + (static_cast<float>(p - l) - f) * data[p - l - 1]);
  data[0] = div * (1 - f) * data[0];
  return i;
}

// An atom's splines along the three dimensions: its first grid point, weights and derivatives.
struct PmeAtomSplines {
  int first[3];
  float th[3][kPmeMaxOrder], dth[3][kPmeMaxOrder];
};
QK_MD_HD inline void pme_atom_splines(const PmeGrid& g, const float* s, PmeAtomSplines* a) {
  const int n[3] = {g.nx, g.ny, g.nz};
  for (int d = 0; d < 3; ++d) a->first[d] = pme_spline(s[d], n[d], g.order, a->th[d], a->dth[d]);
}

// The real grid's index of point (x, y, z), each taken periodically (z fastest).
QK_MD_HD inline size_t pme_index(const PmeGrid& g, int x, int y, int z) {
  return (static_cast<size_t>(x % g.nx) * g.ny + static_cast<size_t>(y % g.ny)) * g.nz + static_cast<size_t>(z % g.nz);
}

// One k-point of the half-complex grid (kx, ky, kz), its transform S: on energy steps the energy and
// virial terms (GROMACS's, as Pme::compute), then S times the influence function eterm.
struct PmeKTerms {
  double energy = 0;
  double vir[6] = {};  // xx, yy, zz, xy, xz, yz, before the 1/4 and the 1/2 applied by the caller
};
QK_MD_HD inline void pme_solve_point(const PmeGrid& g, int kx, int ky, int kz, float eterm, float* re, float* im,
                                     bool energies, PmeKTerms* t) {
  const float mx = static_cast<float>(kx < (g.nx + 1) / 2 ? kx : kx - g.nx) * g.inv[0];
  const float my = static_cast<float>(ky < (g.ny + 1) / 2 ? ky : ky - g.ny) * g.inv[1];
  const float mz = static_cast<float>(kz) * g.inv[2];
  const float m2 = mx * mx + my * my + mz * mz;
  if (m2 == 0) {
    *re = 0;
    *im = 0;
    return;
  }
  if (energies) {
    // The half-complex grid holds kz and -kz once: both count except kz = 0 and nz/2.
    const double weight = (kz == 0 || (g.nz % 2 == 0 && kz == g.nz / 2)) ? 1.0 : 2.0;
    const double s2 = static_cast<double>(*re) * *re + static_cast<double>(*im) * *im;
    const double e = weight * eterm * s2;
    const double vfactor = (static_cast<double>(g.fac) * m2 + 1) * 2 / m2;
    t->energy += e;
    t->vir[0] += e * (vfactor * mx * mx - 1);
    t->vir[1] += e * (vfactor * my * my - 1);
    t->vir[2] += e * (vfactor * mz * mz - 1);
    t->vir[3] += e * vfactor * mx * my;
    t->vir[4] += e * vfactor * mx * mz;
    t->vir[5] += e * vfactor * my * mz;
  }
  *re *= eterm;
  *im *= eterm;
}

}  // namespace qk::md::gpu

// The non-bonded offload's arithmetic for one atom pair, in float, shared by
// the CUDA kernel (nonbonded_cuda.cu) and its host emulation
// (nonbonded_gpu.cc), so the tests here run the same expressions the GPU
// does. The same interactions as the CPU kernel (nonbonded.h), with exact
// erfc/exp for Ewald in place of its fitted polynomial (as GROMACS's CUDA
// kernels use an analytical Ewald correction); within a float's rounding of it.
#pragma once

#include <math.h>

#ifdef __CUDACC__
#define QK_MD_HD __host__ __device__
#else
#define QK_MD_HD
#endif

namespace qk::md::gpu {

// What the kernel needs besides the arrays: the cut-off, the interaction's
// constants (NonbondedParams, in float).
struct NbConsts {
  float rc2 = 1;
  float qfac = 0;                      // f = 1/(4 pi eps0 eps_r)
  float beta = 0, beta_exp = 0;        // Ewald: beta, 2 beta / sqrt(pi)
  float ewald_shift = 0;               // erfc(beta rc) / rc
  float krf = 0, crf = 0;              // reaction field
  float lj_shift6 = 0, lj_shift12 = 0; // rc^-6, rc^-12
  int ntypes = 1;
  int ewald = 0;
};

struct NbPair {
  float fscal = 0;  // force / r, along x_i - x_j
  float vlj = 0, vc = 0;
};

// One pair inside the cut-off at r2 (> 0): qq = f qi qj; c6, c12 hold 6 c6 and 12 c12 (GROMACS's nbfp).
template <bool kEwald, bool kEnergy>
QK_MD_HD inline NbPair nb_pair(const NbConsts& k, float r2, float qq, float c6, float c12) {
  NbPair p;
  const float rinv = 1.0f / sqrtf(r2), rinv2 = rinv * rinv, rinv6 = rinv2 * rinv2 * rinv2;
  p.fscal = (c12 * rinv6 - c6) * rinv6 * rinv2;
  if constexpr (kEwald) {
    const float r = r2 * rinv, br = k.beta * r;
    const float erfc_r = erfcf(br) * rinv;  // erfc(beta r) / r
    p.fscal += qq * (erfc_r + k.beta_exp * expf(-br * br)) * rinv2;
    if constexpr (kEnergy) p.vc = qq * (erfc_r - k.ewald_shift);
  } else {
    p.fscal += qq * (rinv * rinv2 - 2.0f * k.krf);
    if constexpr (kEnergy) p.vc = qq * (rinv + k.krf * r2 - k.crf);
  }
  if constexpr (kEnergy)
    p.vlj = c12 * (1.0f / 12) * (rinv6 * rinv6 - k.lj_shift12) - c6 * (1.0f / 6) * (rinv6 - k.lj_shift6);
  return p;
}

}  // namespace qk::md::gpu

// Short-range non-bonded interactions as GROMACS's Verlet-scheme kernels
// compute them (nbnxm), over the cluster pairs of the pair list: each cluster
// pair is 4 x 4 = 16 atom pairs done as one plain loop over fixed-size
// arrays, which the compiler turns into SIMD (no intrinsics, so it runs on any
// x86-64 or other CPU), masked by the list's interaction bits and the exact
// cut-off:
//
//   LJ, potential-shift:   V = c12 (r^-12 - rc^-12) - c6 (r^-6 - rc^-6)
//   Coulomb, reaction field (krf = (eps_rf - eps_r) / ((2 eps_rf + eps_r) rc^3),
//     crf = 1/rc + krf rc^2, eps_rf = 0 meaning infinity):
//                          V = f qi qj (1/r + krf r^2 - crf)
//   Coulomb, Ewald real space, potential-shift:
//                          V = f qi qj (erfc(beta r)/r - erfc(beta rc)/rc)
//
// all for r < rc. Excluded pairs closer than rc still interact through the
// Coulomb correction terms GROMACS puts in its kernel: reaction field
// f qi qj (krf r^2 - crf), Ewald -f qi qj erf(beta r)/r (removing what the mesh
// added for them); and every atom has a self term, -f qi^2 crf / 2 (reaction
// field) or -f qi^2 beta/sqrt(pi) (Ewald). GROMACS reports all of these in
// "Coulomb (SR)", so we do too. f = 1/(4 pi eps0 eps_r).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ewald_table.h"
#include "pair_list.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

struct NonbondedParams {
  double rc = 1.0;             // the cut-off (rvdw == rcoulomb)
  bool ewald = false;          // else reaction field
  double beta = 0;             // Ewald splitting coefficient, 1/nm
  double epsilon_r = 1, epsilon_rf = 0;
  // Derived by finish().
  double coulomb_factor = 0, krf = 0, crf = 0, ewald_shift = 0, lj_shift6 = 0, lj_shift12 = 0;
  EwaldTable ewald_table;  // erf(beta r)/r and its force, tabulated up to rc
  void finish();
};

struct NonbondedEnergies {
  double lj = 0, coulomb = 0;
  Mat3 virial{};
};

// Entries [begin, end) of a pair list's entries() (the default: all of them).
struct EntryRange {
  int64_t begin = 0, end = INT64_MAX;
};

// Rank `rank` of `size`'s share of the list: consecutive entries with about
// 1/size of the cluster pairs (ForceShare, forces.h).
EntryRange entry_share(const PairList& list, int rank, int size);

// The cluster kernel in double or in single precision (GROMACS's mixed
// precision: float positions relative to the box, float pair forces; energies,
// force totals and the virial summed in double). Threads over list entries,
// each with its own force buffer, reduced in a fixed order.
class NonbondedKernel {
 public:
  NonbondedKernel(const Topology& top, const NonbondedParams& p, bool single_precision);
  ~NonbondedKernel();
  NonbondedKernel(const NonbondedKernel&) = delete;
  NonbondedKernel& operator=(const NonbondedKernel&) = delete;
  // Adds the list's interactions' forces to f (size N) and returns energies and virial
  // (without `energies`, only forces: the energies and virial returned are zero). `range`: only
  // those entries' interactions.
  NonbondedEnergies compute(const PairList& list, const std::vector<Vec3>& x, bool energies, std::vector<Vec3>* f,
                            EntryRange range = {});
  // Another topology (a domain's atoms, anew at each partition) from now on; the float kernel's Ewald fit stays.
  void set_topology(const Topology& top);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Atom ranges [bounds[k], bounds[k+1]) that no exclusion crosses (exclusions stay within a molecule), at
// most max_chunks of them, about equal: the corrections below run over them in parallel, each range
// writing only its own atoms' forces.
std::vector<int> exclusion_chunks(const Topology& top, int max_chunks);

// The excluded pairs' Coulomb corrections (forces added to f) and the self terms; with `chunks` from
// exclusion_chunks in parallel, summed in chunk order (the same for any thread count).
NonbondedEnergies coulomb_exclusions_and_self(const std::vector<Vec3>& x, const RectBox& box, const Topology& top,
                                              const NonbondedParams& p, std::vector<Vec3>* f,
                                              const std::vector<int>& chunks = {});

}  // namespace qk::md

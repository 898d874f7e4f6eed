// HPL's random matrix: the 64-bit linear congruential generator of netlib
// HPL 2.x (HPL_rand / HPL_pdmatgen). Entry (i, j) of an M-row matrix takes
// state number i + j M + 1 after the seed, x' = a x + c (mod 2^64) with
// a = 6364136223846793005, c = 1, and value 0.5 - x / 2^64, so every rank
// generates its own blocks independently and the same matrix appears for any
// P x Q and NB.
#pragma once

#include <cstdint>

#include "hpl/grid.h"

namespace qk::hpc::hpl {

constexpr uint64_t kHplSeed = 100;  // HPL_ISEED in HPL_pdtest

// The affine map x -> mult x + add (mod 2^64) of `steps` generator steps.
struct Jump {
  uint64_t mult = 1, add = 0;
  uint64_t apply(uint64_t x) const { return mult * x + add; }
};
Jump jump_of(uint64_t steps);

inline double hpl_value(uint64_t state) {
  return 0.5 - static_cast<double>(state) * 0x1p-64;
}

// Fills local columns [jl0, jl1) of my part of the M x ncols global matrix
// (rows over the grid's process rows, columns over process columns) into
// out + (jl - jl0) * ld.
void generate_local_columns(const Grid& g, int64_t m, int nb, uint64_t seed, int64_t jl0,
                            int64_t jl1, double* out, int64_t ld);

}  // namespace qk::hpc::hpl

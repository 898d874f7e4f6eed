// HPL's random matrix generator (see matgen.h).
#include "hpl/matgen.h"

namespace qk::hpc::hpl {
namespace {
constexpr uint64_t kMult = 6364136223846793005ULL;  // HPL_MULT1:HPL_MULT0
constexpr uint64_t kAdd = 1;                         // HPL_IADD1:HPL_IADD0
}  // namespace

Jump jump_of(uint64_t steps) {
  // Square-and-multiply over the affine maps.
  Jump result;  // identity
  Jump base{kMult, kAdd};
  while (steps) {
    if (steps & 1) result = Jump{base.mult * result.mult, base.mult * result.add + base.add};
    base = Jump{base.mult * base.mult, base.mult * base.add + base.add};
    steps >>= 1;
  }
  return result;
}

void generate_local_columns(const Grid& g, int64_t m, int nb, uint64_t seed, int64_t jl0,
                            int64_t jl1, double* out, int64_t ld) {
  const int64_t mp = numroc(m, nb, g.myrow, g.nprow);
  if (mp == 0) return;
  const Jump one = jump_of(1);
  // Between my row blocks the sequence skips the other process rows' blocks.
  const Jump skip = jump_of(static_cast<uint64_t>(nb) * (g.nprow - 1));
  for (int64_t jl = jl0; jl < jl1; ++jl) {
    const int64_t j = l2g(jl, nb, g.mycol, g.npcol);
    const int64_t i0 = l2g(0, nb, g.myrow, g.nprow);
    // State number i0 + j m + 1 after the seed.
    uint64_t x = jump_of(static_cast<uint64_t>(i0 + j * m + 1)).apply(seed);
    double* col = out + (jl - jl0) * ld;
    for (int64_t il = 0; il < mp; ++il) {
      if (il > 0 && il % nb == 0) x = skip.apply(x);
      col[il] = hpl_value(x);
      x = one.apply(x);
    }
  }
}

}  // namespace qk::hpc::hpl

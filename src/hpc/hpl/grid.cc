// Process grid construction (see grid.h).
#include "hpl/grid.h"

#include "qk/base/error.h"

namespace qk::hpc::hpl {

Grid make_grid(const Comm& world, int p, int q, bool row_major) {
  QK_CHECK(p >= 1 && q >= 1, "HPL: expected P >= 1 and Q >= 1, got P=", p, " Q=", q);
  QK_CHECK(static_cast<int64_t>(p) * q == world.size(), "HPL: the grid P x Q = ", p, " x ", q,
           " = ", static_cast<int64_t>(p) * q, " needs that many ranks, but this job has ",
           world.size(), " rank(s); start it with `mpirun -np ", static_cast<int64_t>(p) * q,
           "` or change P and Q");
  Grid g;
  g.nprow = p;
  g.npcol = q;
  g.row_major = row_major;
  int r = world.rank();
  if (row_major) {
    g.myrow = r / q;
    g.mycol = r % q;
  } else {
    g.mycol = r / p;
    g.myrow = r % p;
  }
  g.row = world.split(g.myrow, g.mycol);
  g.col = world.split(g.nprow + g.mycol, g.myrow);
  return g;
}

}  // namespace qk::hpc::hpl

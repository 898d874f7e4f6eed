// The P x Q process grid and the 2-D block-cyclic layout HPL distributes
// [A | b] with: global row i lives on process row (i / nb) % P, at local row
// (i / (nb P)) nb + i % nb; columns likewise over Q. Local storage is
// column-major with leading dimension `lda`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "qk/hpc/comm.h"
#include "qk/hpc/hpl.h"

namespace qk::hpc::hpl {

struct Grid {
  int nprow = 1, npcol = 1, myrow = 0, mycol = 0;
  bool row_major = true;
  Comm row;  // my process row: ranks ordered by column (size Q)
  Comm col;  // my process column: ranks ordered by row (size P)
};

// World rank of process (r, c) under the grid's mapping.
inline int grid_rank(const Grid& g, int r, int c) {
  return g.row_major ? r * g.npcol + c : c * g.nprow + r;
}

// Splits `world` into the grid; throws if world.size() != P * Q.
Grid make_grid(const Comm& world, int p, int q, bool row_major);

// Number of the n global indices (blocks of nb dealt round-robin over nprocs
// starting at process 0) that process `iproc` owns.
inline int64_t numroc(int64_t n, int nb, int iproc, int nprocs) {
  int64_t nblocks = n / nb;
  int64_t r = (nblocks / nprocs) * nb;
  int64_t extra = nblocks % nprocs;
  if (iproc < extra) r += nb;
  else if (iproc == extra) r += n % nb;
  return r;
}
inline int owner(int64_t g, int nb, int nprocs) { return static_cast<int>((g / nb) % nprocs); }
inline int64_t g2l(int64_t g, int nb, int nprocs) { return (g / (int64_t(nb) * nprocs)) * nb + g % nb; }
inline int64_t l2g(int64_t l, int nb, int iproc, int nprocs) {
  return ((l / nb) * nprocs + iproc) * nb + l % nb;
}
// Local count of my indices below global index g (the first local index >= g).
inline int64_t local_before(int64_t g, int nb, int iproc, int nprocs) { return numroc(g, nb, iproc, nprocs); }

// My piece of the N x (N+1) matrix [A | b].
struct LocalMatrix {
  int64_t n = 0;   // global order N
  int nb = 0;
  int64_t mp = 0;  // local rows
  int64_t nq = 0;  // local columns (of N+1)
  int64_t lda = 1;
  double* a = nullptr;  // lda x nq, column-major (owned by storage)
  std::vector<double> storage;
  double& at(int64_t i, int64_t j) { return a[i + j * lda]; }
};

}  // namespace qk::hpc::hpl

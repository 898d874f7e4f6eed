// HPCG's problem: geometry of the 3-D process grid, the 27-point stencil
// matrix of each multigrid level, its halo, and the fine-to-coarse map
// (GenerateGeometry, GenerateProblem, SetupHalo, GenerateCoarseProblem).
//
// Storage: every row has a fixed slot count of 27 (row-major, cols and vals),
// filled in the reference's neighbour order (z, then y, then x, each -1..1)
// and padded with (own column, 0.0). Columns < nrow are local points
// (ix + nx (iy + ny iz)); columns >= nrow are halo copies received from the
// neighbouring ranks, grouped by neighbour and sorted by global index.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qk/hpc/comm.h"

namespace qk::hpc::hpcg {

constexpr int kSlots = 27;

struct Geometry {
  int size = 1, rank = 0;
  int npx = 1, npy = 1, npz = 1;
  int ipx = 0, ipy = 0, ipz = 0;
  int nx = 0, ny = 0, nz = 0;     // local
  int64_t gnx = 0, gny = 0, gnz = 0;
  int64_t gx0 = 0, gy0 = 0, gz0 = 0;  // global offset of my box
  int rank_of(int px, int py, int pz) const { return px + npx * (py + npy * pz); }
};

// Chooses npx * npy * npz = size as close to a cube as possible (z gets the
// largest factor), unless the caller fixed them; throws if they do not multiply
// to `size`.
Geometry make_geometry(int size, int rank, int nx, int ny, int nz, int npx, int npy, int npz);

struct Halo {
  std::vector<int> neighbors;        // ranks
  std::vector<int64_t> recv_count;   // externals from each, contiguous from nrow in this order
  std::vector<int64_t> send_count;
  std::vector<int32_t> send_index;   // local rows to send, concatenated by neighbor
  std::vector<double> send_buf;
};

// How the optimized kernels treat an x-line: every point through its general
// row; the inner points (0 < x < nx - 1) by fixed offsets and the two ends
// through their rows; or every point by fixed offsets (no halo neighbour, and
// every offset read stays inside the local vector).
enum LineMode : uint8_t { kLineGeneral = 0, kLineInner = 1, kLineFull = 2 };

struct Level {
  Geometry geo;
  int64_t nrow = 0, ncol = 0;
  int64_t global_rows = 0, global_nnz = 0, local_nnz = 0;
  std::vector<int32_t> cols;     // nrow x 27
  std::vector<double> vals;      // nrow x 27
  std::vector<uint8_t> nnz;      // per row
  std::vector<uint8_t> diag_slot;
  std::vector<double> diag;      // the diagonal, for SymGS
  Halo halo;
  // Multigrid: the next coarser level, the fine row of each coarse row, and
  // work vectors (fine A x, coarse residual, coarse correction).
  std::unique_ptr<Level> coarse;
  std::vector<int32_t> f2c;
  std::vector<double> axf, rc, xc;
  // The optimized path's copy of the matrix (Note [line stencil] in
  // problem.cc), filled by optimize_problem: the values of x-line
  // l = y + ny z by stencil slot, line_vals[(l * 27 + slot) * nx + x] (zero
  // where a neighbour does not exist); how each line can be computed
  // (line_mode); each slot's column offset; and per row 1/diagonal and the
  // x-1 and x+1 coefficients over the diagonal, for the SymGS recurrences.
  std::vector<double> line_vals;
  std::vector<uint8_t> line_mode;  // LineMode
  std::vector<double> inv_diag, left_over_diag, right_over_diag;
  int64_t offsets[kSlots] = {};
};

// The fine level plus `levels - 1` coarser ones; fills b (exact solution all
// ones) for the fine level. Local dims must be divisible by 2^(levels-1).
std::unique_ptr<Level> generate_problem(const Comm& world, const Geometry& geo, int levels,
                                        std::vector<double>* b);

// Fills x[nrow .. ncol) with the neighbours' boundary values. Collective with
// the neighbours.
void exchange_halo(Level& a, const Comm& world, double* x);

// Fills the optimized copy (line_vals, line_mode, offsets, inv_diag, ...)
// from vals and diag on this level and, when `recursive`, on every coarser
// one (HPCG's OptimizeProblem). Call again after changing them (TestCG
// scales the diagonal).
void optimize_problem(Level& a, bool recursive = true);

}  // namespace qk::hpc::hpcg

// HPCG: the High Performance Conjugate Gradients benchmark (see docs/hpc.md).
//
//   qk::hpc::MpiSession mpi;
//   qk::hpc::HpcgParams p;            // 104^3 points per rank by default
//   p.nx = p.ny = p.nz = 32;
//   p.seconds = 10;
//   qk::hpc::HpcgResult r = qk::hpc::run_hpcg(qk::hpc::Comm::world(), p);
//   // r.valid, r.rating_gflops, r.cg_sets
//
// The problem is the reference's: a 27-point stencil (26 on the diagonal, -1
// off it) on an nx x ny x nz box per rank, ranks in a 3-D process grid, b
// chosen so the exact solution is all ones. CG runs in sets of 50 iterations,
// preconditioned by a 4-level multigrid V-cycle with one symmetric
// Gauss-Seidel sweep before and after each coarsening.
//
// Two implementations of the kernels: the reference path (serial per rank, as
// in HPCG 3.1's *_ref.cpp) and the optimized default (threaded wavefront
// SymGS that performs exactly the reference's arithmetic, threaded SpMV,
// residual computed only where the restriction needs it, fused vector ops).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qk/hpc/comm.h"

namespace qk::hpc {

struct HpcgParams {
  int nx = 104, ny = 104, nz = 104;  // local grid per rank; multiples of 8 (3 coarsenings)
  int npx = 0, npy = 0, npz = 0;     // process grid (0: chosen as cubic as possible)
  double seconds = 60.0;             // benchmark phase length (at least one CG set)
  bool reference = false;            // use the reference kernels for the timed sets
  int threads = 0;                   // threads per rank for the optimized kernels (0: auto)
};

struct HpcgOptions {
  double progress_seconds = 10.0;  // rank 0 prints progress this often (<= 0: never)
  // Perturbs one off-diagonal entry of the fine matrix, which the symmetry
  // test must catch.
  bool inject_asymmetry = false;
  // Stop after validation and one 50-iteration CG set (tests).
  bool quick = false;
};

struct HpcgResult {
  // Problem.
  int npx = 1, npy = 1, npz = 1;
  int64_t global_rows = 0, global_nnz = 0;
  // Validation (TestSymmetry, TestCG).
  double symmetry_spmv = 0, symmetry_mg = 0;  // scaled departures; must be <= 1
  int cg_unprec_iters = 0, cg_prec_iters = 0; // worst over the test calls
  bool symmetry_passed = false, iterations_passed = false;
  // Reference convergence: residual after 50 iterations of the reference path.
  double ref_tolerance = 0;
  int opt_iters = 50;                  // iterations the timed path needs for ref_tolerance
  std::vector<double> residual_history;      // ||r_k|| / ||r_0|| of the first timed set
  std::vector<double> ref_residual_history;  // the same for the reference run
  double final_residual = 0;                 // worst ||r|| / ||r_0|| at the end of a set
  // Timing.
  int cg_sets = 0;
  double seconds = 0;                 // timed sets
  double setup_seconds = 0;           // problem generation + optimization setup
  double gflops_raw = 0;              // flops of the timed sets / time
  double gflops_ddot = 0, gflops_waxpby = 0, gflops_spmv = 0, gflops_mg = 0;
  double rating_gflops = 0;           // with the convergence penalty, as HPCG reports
  double bandwidth_gbs = 0;           // bytes moved (model) / time
  bool valid = false;
  std::string path;                   // "reference" or "optimized"
};

// Runs HPCG on `world`. Collective. Throws qk::ValueError for a bad grid.
HpcgResult run_hpcg(const Comm& world, const HpcgParams& p, const HpcgOptions& opt = {});

// The report rank 0 prints.
std::string format_hpcg_report(const HpcgParams& p, const HpcgResult& r, int ranks);

// Memory one rank needs for the local problem (all four levels), in bytes.
int64_t hpcg_bytes_per_rank(const HpcgParams& p);

}  // namespace qk::hpc

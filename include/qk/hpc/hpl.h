// HPL: the High-Performance Linpack benchmark, solving a dense random system
// A x = b by LU with partial pivoting on a P x Q process grid (see docs/hpc.md).
//
//   qk::hpc::MpiSession mpi;
//   qk::hpc::HplDat dat = qk::hpc::parse_hpl_dat(qk::read_file("HPL.dat"), "HPL.dat");
//   for (const qk::hpc::HplParams& p : dat.runs()) {
//     qk::hpc::HplResult r = qk::hpc::run_hpl(qk::hpc::Comm::world(), p);
//     // r.gflops, r.scaled_residual, r.passed
//   }
//
// The algorithm follows the reference (netlib HPL 2.3): the matrix [A | b] is
// generated with HPL's linear congruential generator (seed 100) in 2-D
// block-cyclic layout, factored panel by panel (recursive panel factorization,
// panel broadcast along process rows, row swaps, DGEMM trailing update, with
// optional look-ahead of depth 1), x is found by back substitution, and the
// scaled residual ||Ax-b||_oo / (eps (||A||_oo ||x||_oo + ||b||_oo) N) must be
// below the threshold (16.0) for PASSED.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qk/hpc/comm.h"

namespace qk::hpc {

// Panel factorization variant (PFACT, RFACT): the order of the same updates.
enum class HplFact { kLeft = 0, kCrout = 1, kRight = 2 };
// Panel broadcast topology (BCAST). HPL's 4 and 5 (long) are not implemented.
enum class HplBcast { kRing = 0, kRingM = 1, kTwoRing = 2, kTwoRingM = 3 };

// One benchmark run: one point of HPL.dat's cross product.
struct HplParams {
  int64_t n = 1000;
  int nb = 192;
  int p = 1;
  int q = 1;
  bool row_major = true;  // PMAP: rank = myrow * Q + mycol (else mycol * P + myrow)
  double threshold = 16.0;
  HplFact pfact = HplFact::kRight;
  int nbmin = 4;
  int ndiv = 2;
  HplFact rfact = HplFact::kCrout;
  HplBcast bcast = HplBcast::kRingM;
  int depth = 1;  // look-ahead depth: 0 or 1
  int swap = 2;   // SWAP 0/1/2 is recorded; one spread-and-roll swap is used (docs/hpc.md)
  int swap_threshold = 64;
};

// The "T/V" column of HPL's output, e.g. "WR11C2R4".
std::string hpl_tv(const HplParams& p);

// A parsed HPL.dat: the lists, run as their cross product by runs().
struct HplDat {
  std::string out_file = "HPL.out";
  int device_out = 6;  // 6 stdout, 7 stderr, else out_file
  std::vector<int64_t> ns;
  std::vector<int> nbs;
  bool row_major = true;
  std::vector<std::pair<int, int>> grids;  // (P, Q) pairs, not crossed
  double threshold = 16.0;
  std::vector<HplFact> pfacts;
  std::vector<int> nbmins;
  std::vector<int> ndivs;
  std::vector<HplFact> rfacts;
  std::vector<HplBcast> bcasts;
  std::vector<int> depths;
  int swap = 2;
  int swap_threshold = 64;
  std::vector<HplParams> runs() const;
};

// Parses the netlib HPL.dat text. Throws qk::ValueError naming `source` and
// the line number for any line that does not parse or holds a bad value.
HplDat parse_hpl_dat(std::string_view text, std::string_view source);

struct HplOptions {
  double progress_seconds = 10.0;  // rank 0 prints progress this often (<= 0: never)
  bool inject_fault = false;       // corrupt one trailing update (to test the check)
  double memory_fraction = 0.85;   // refuse N when the estimate exceeds this share of free memory
  int blas_threads = 0;            // OpenBLAS threads per rank (0: cores / ranks on the node)
};

struct HplResult {
  std::string tv;
  double seconds = 0;         // factorization + solve, max over ranks
  double gflops = 0;          // (2/3 N^3 + 3/2 N^2) / seconds
  double resid_norm = 0;      // ||Ax-b||_oo
  double norm_a = 0, norm_x = 0, norm_b = 0;
  double scaled_residual = 0; // the figure compared with the threshold
  bool passed = false;
  std::vector<double> x;      // the solution (every rank holds all of it)
};

// Bytes one rank needs for a run (matrix, panels, work), for refusing N early.
int64_t hpl_bytes_per_rank(const HplParams& p, int myrow, int mycol);

// Runs one HPL test on `world` (size must equal P * Q). Collective.
HplResult run_hpl(const Comm& world, const HplParams& p, const HplOptions& opt = {});

// Formats the result block of HPL's output (T/V line and residual line).
std::string format_hpl_header();
std::string format_hpl_result(const HplParams& p, const HplResult& r);

}  // namespace qk::hpc

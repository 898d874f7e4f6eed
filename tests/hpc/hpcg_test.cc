// HPCG: the 16^3 problem validates on both paths, the optimized path follows
// the reference's residual history to round-off, and an injected asymmetry is
// caught by the symmetry test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "hpcg/cg.h"
#include "hpcg/problem.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/comm.h"
#include "qk/hpc/hpcg.h"

namespace qk::hpc {
namespace {

const Comm& world() {
  static MpiSession mpi;
  static Comm w = Comm::world();
  return w;
}

HpcgResult quick_run(bool reference, bool asym = false, int threads = 2) {
  HpcgParams p;
  p.nx = p.ny = p.nz = 16;
  p.reference = reference;
  p.threads = threads;
  p.seconds = 0;
  HpcgOptions opt;
  opt.quick = true;
  opt.progress_seconds = 0;
  opt.inject_asymmetry = asym;
  return run_hpcg(world(), p, opt);
}

TEST(Hpcg, ReferencePathValidatesOn16Cubed) {
  auto r = quick_run(/*reference=*/true);
  EXPECT_TRUE(r.valid);
  EXPECT_TRUE(r.symmetry_passed) << r.symmetry_spmv << " " << r.symmetry_mg;
  EXPECT_LE(r.cg_unprec_iters, 12);
  EXPECT_LE(r.cg_prec_iters, 2);
  EXPECT_EQ(r.opt_iters, 50);  // the reference reaches its own tolerance in 50
  EXPECT_EQ(r.global_rows, 16 * 16 * 16);
  // Interior rows have 27 nonzeros; faces, edges and corners fewer.
  EXPECT_EQ(r.global_nnz, 27 * 14 * 14 * 14 + 18 * 6 * 14 * 14 + 12 * 12 * 14 + 8 * 8);
  EXPECT_LT(r.final_residual, 1e-6);
  EXPECT_GT(r.rating_gflops, 0.0);
}

TEST(Hpcg, OptimizedPathValidatesAndMatchesReferenceHistory) {
  auto r = quick_run(/*reference=*/false);
  EXPECT_TRUE(r.valid);
  ASSERT_EQ(r.residual_history.size(), static_cast<size_t>(r.opt_iters));
  ASSERT_GE(r.ref_residual_history.size(), 50u);
  EXPECT_LE(r.opt_iters, 51);
  // Same arithmetic per row, dot products summed in another order: the
  // histories agree to round-off (relative to the starting residual).
  for (size_t i = 0; i < 50; ++i)
    EXPECT_NEAR(r.residual_history[i], r.ref_residual_history[i],
                1e-12 + 1e-8 * r.ref_residual_history[i])
        << "iteration " << i + 1;
}

// A 32 x 32 x 24 problem (big enough for the threaded sweep) with the
// optimized copy of the matrix.
std::unique_ptr<hpcg::Level> problem_32(std::vector<double>* b) {
  auto geo = hpcg::make_geometry(1, 0, 32, 32, 24, 1, 1, 1);
  auto a = hpcg::generate_problem(world(), geo, 4, b);
  hpcg::optimize_problem(*a);
  return a;
}

double max_abs_diff(const std::vector<double>& x, const std::vector<double>& y, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(x[i] - y[i]));
  return d;
}

TEST(Hpcg, OptimizedSymgsIsTheReferenceSweepToRoundoff) {
  // Same update order (lexicographic), each row's terms summed in another
  // order: the results agree to a few ulps, far below what a wrong (old
  // instead of new) neighbour value would change.
  set_num_threads(2);
  std::vector<double> b;
  auto a = problem_32(&b);
  auto ref = hpcg::make_reference_kernels(world());
  auto opt = hpcg::make_optimized_kernels(world());
  std::vector<double> x1(a->ncol, 0.0), x2(a->ncol, 0.0);
  ref->mg(*a, b.data(), x1.data());
  opt->mg(*a, b.data(), x2.data());
  EXPECT_LT(max_abs_diff(x1, x2, a->nrow), 1e-14);  // x is about 0.04..1
  for (int64_t i = 0; i < a->nrow; ++i) x1[i] = x2[i] = 0.001 * (i % 97);
  ref->symgs(*a, b.data(), x1.data());
  opt->symgs(*a, b.data(), x2.data());
  EXPECT_LT(max_abs_diff(x1, x2, a->nrow), 1e-14);
  // A Jacobi-like sweep (all old values) is far off: the bound above is tight
  // enough to tell.
  std::vector<double> x3(a->ncol);
  for (int64_t i = 0; i < a->nrow; ++i) x3[i] = 0.001 * (i % 97);
  std::vector<double> ax(a->ncol);
  ref->spmv(*a, x3.data(), ax.data());
  for (int64_t i = 0; i < a->nrow; ++i) x3[i] += (b[i] - ax[i]) / a->diag[i];
  EXPECT_GT(max_abs_diff(x1, x3, a->nrow), 1e-3);
  // SpMV sums the slots in the reference's order.
  std::vector<double> y1(a->ncol), y2(a->ncol);
  ref->spmv(*a, x1.data(), y1.data());
  opt->spmv(*a, x1.data(), y2.data());
  EXPECT_LT(max_abs_diff(y1, y2, a->nrow), 1e-13);
}

TEST(Hpcg, ThreadedSymgsPipelineIsBitwiseTheSerialSweep) {
  // Each row's arithmetic does not depend on the thread count, so 2 and 3
  // bands (a middle band waits on both sides) must reproduce 1 thread bit
  // for bit; a missed wait would read a stale or too-new neighbour.
  std::vector<double> b;
  auto a = problem_32(&b);
  auto opt = hpcg::make_optimized_kernels(world());
  std::vector<double> serial(a->ncol);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<double> x(a->ncol);
    for (int64_t i = 0; i < a->nrow; ++i) x[i] = 0.001 * (i % 89);
    for (int sweep = 0; sweep < 3; ++sweep) opt->symgs(*a, b.data(), x.data());
    if (threads == 1) {
      serial = x;
      continue;
    }
    for (int64_t i = 0; i < a->nrow; ++i)
      ASSERT_EQ(serial[i], x[i]) << "row " << i << ", " << threads << " threads";
  }
  set_num_threads(2);
}

TEST(Hpcg, InjectedAsymmetryIsDetected) {
  for (bool reference : {true, false}) {
    auto r = quick_run(reference, /*asym=*/true);
    EXPECT_FALSE(r.symmetry_passed) << "reference=" << reference;
    EXPECT_GT(r.symmetry_spmv, 1.0);
    EXPECT_FALSE(r.valid);
  }
}

TEST(Hpcg, BadGridsAreRejected) {
  HpcgParams p;
  p.nx = 20;  // not a multiple of 8
  p.ny = p.nz = 16;
  EXPECT_THROW(run_hpcg(world(), p), Error);
  p.nx = 16;
  p.npx = 2, p.npy = 1, p.npz = 1;  // needs 2 ranks
  EXPECT_THROW(run_hpcg(world(), p), Error);
  p.npx = p.npy = p.npz = 0;
  p.nx = p.ny = p.nz = 8192;  // terabytes
  EXPECT_THROW(run_hpcg(world(), p), Error);
}

TEST(Hpcg, ProcessGridIsCubic) {
  auto g = hpcg::make_geometry(8, 5, 16, 16, 16, 0, 0, 0);
  EXPECT_EQ(g.npx * g.npy * g.npz, 8);
  EXPECT_EQ(g.npx, 2);
  EXPECT_EQ(g.npz, 2);
  EXPECT_EQ(g.rank_of(g.ipx, g.ipy, g.ipz), 5);
  auto g2 = hpcg::make_geometry(2, 1, 16, 16, 16, 0, 0, 0);
  EXPECT_EQ(g2.npz, 2);
  EXPECT_EQ(g2.gz0, 16);
}

}  // namespace
}  // namespace qk::hpc

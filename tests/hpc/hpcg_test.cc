// HPCG: the 16^3 problem validates on both paths, the optimized path follows
// the reference's residual history to round-off, and an injected asymmetry is
// caught by the symmetry test.
#include <gtest/gtest.h>

#include <cmath>

#include "hpc/hpcg/cg.h"
#include "hpc/hpcg/problem.h"
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

TEST(Hpcg, OptimizedSymgsIsBitwiseTheReferenceSweep) {
  // The line wavefront reorders the work, not the arithmetic, also with two
  // threads sharing each wavefront (32^3 is big enough to be shared).
  set_num_threads(2);
  auto geo = hpcg::make_geometry(1, 0, 32, 32, 24, 1, 1, 1);
  std::vector<double> b;
  auto a = hpcg::generate_problem(world(), geo, 4, &b);
  hpcg::build_wavefronts(*a);
  auto ref = hpcg::make_reference_kernels(world());
  auto opt = hpcg::make_optimized_kernels(world());
  std::vector<double> x1(a->ncol, 0.0), x2(a->ncol, 0.0);
  ref->mg(*a, b.data(), x1.data());
  opt->mg(*a, b.data(), x2.data());
  for (int64_t i = 0; i < a->nrow; ++i) ASSERT_EQ(x1[i], x2[i]) << "row " << i;
  // And a single sweep from a nonzero start.
  for (int64_t i = 0; i < a->nrow; ++i) x1[i] = x2[i] = 0.001 * (i % 97);
  ref->symgs(*a, b.data(), x1.data());
  opt->symgs(*a, b.data(), x2.data());
  for (int64_t i = 0; i < a->nrow; ++i) ASSERT_EQ(x1[i], x2[i]) << "row " << i;
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

// HPL: solves PASS on one rank in-process, match LAPACK's dgesv, and a
// corrupted update FAILS the check.
#include <gtest/gtest.h>
#include <lapacke.h>

#include <cmath>
#include <vector>

#include "hpl/grid.h"
#include "hpl/matgen.h"
#include "qk/base/error.h"
#include "qk/hpc/comm.h"
#include "qk/hpc/hpl.h"

namespace qk::hpc {
namespace {

const Comm& world() {
  static MpiSession mpi;
  static Comm w = Comm::world();
  return w;
}

HplResult solve(int64_t n, int nb, HplParams p = {}) {
  p.n = n;
  p.nb = nb;
  HplOptions opt;
  opt.blas_threads = 1;
  opt.progress_seconds = 0;
  return run_hpl(world(), p, opt);
}

TEST(Hpl, SmallSizesPassOnOneRank) {
  // N = 1, N < NB, N not a multiple of NB, N a multiple of NB.
  for (auto [n, nb] : std::vector<std::pair<int, int>>{
           {1, 4}, {7, 16}, {64, 16}, {100, 32}, {257, 32}, {500, 64}}) {
    auto r = solve(n, nb);
    EXPECT_TRUE(r.passed) << "N=" << n << " NB=" << nb << " scaled=" << r.scaled_residual;
    EXPECT_LT(r.scaled_residual, 1.0) << "N=" << n;
    EXPECT_GT(r.norm_a, 0.0);
  }
}

TEST(Hpl, EveryFactorizationVariantAndDepthPasses) {
  for (int pf = 0; pf < 3; ++pf)
    for (int rf = 0; rf < 3; ++rf)
      for (int depth = 0; depth < 2; ++depth) {
        HplParams p;
        p.pfact = static_cast<HplFact>(pf);
        p.rfact = static_cast<HplFact>(rf);
        p.depth = depth;
        p.nbmin = 2;
        p.ndiv = 3;
        auto r = solve(150, 24, p);
        EXPECT_TRUE(r.passed) << hpl_tv(p) << " scaled=" << r.scaled_residual;
      }
}

TEST(Hpl, CorruptedUpdateFailsTheCheck) {
  HplParams p;
  p.n = 200;
  p.nb = 32;
  HplOptions opt;
  opt.inject_fault = true;
  opt.blas_threads = 1;
  opt.progress_seconds = 0;
  auto r = run_hpl(world(), p, opt);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.scaled_residual, 16.0);
}

TEST(Hpl, MatchesLapackDgesv) {
  const int n = 300;
  // The same matrix HPL generates, on one process: [A | b], N x (N+1).
  hpl::Grid g;
  std::vector<double> ab(static_cast<size_t>(n) * (n + 1));
  hpl::generate_local_columns(g, n, 64, hpl::kHplSeed, 0, n + 1, ab.data(), n);
  std::vector<double> a(ab.begin(), ab.begin() + int64_t(n) * n);
  std::vector<double> b(ab.begin() + int64_t(n) * n, ab.end());
  std::vector<lapack_int> ipiv(n);
  ASSERT_EQ(LAPACKE_dgesv(LAPACK_COL_MAJOR, n, 1, a.data(), n, ipiv.data(), b.data(), n), 0);
  auto r = solve(n, 64);
  ASSERT_TRUE(r.passed);
  // Both are backward stable: their difference is bounded by the condition
  // number times the residual bound; compare relative to ||x||.
  double diff = 0, xmax = 0;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(r.x[i] - b[i]));
    xmax = std::max(xmax, std::fabs(b[i]));
  }
  EXPECT_LT(diff / xmax, 1e-9) << "max |x_hpl - x_dgesv| = " << diff;
  // And the LAPACK solution passes HPL's own check.
  double resid = 0, anorm = 0, bnorm = 0;
  for (int i = 0; i < n; ++i) {
    double s = -ab[int64_t(n) * n + i], rs = 0;
    for (int j = 0; j < n; ++j) {
      s += ab[i + int64_t(j) * n] * b[j];
      rs += std::fabs(ab[i + int64_t(j) * n]);
    }
    resid = std::max(resid, std::fabs(s));
    anorm = std::max(anorm, rs);
    bnorm = std::max(bnorm, std::fabs(ab[int64_t(n) * n + i]));
  }
  const double scaled = resid / (0x1p-53 * (anorm * xmax + bnorm) * n);
  EXPECT_LT(scaled, 16.0);
  EXPECT_NEAR(r.norm_a, anorm, 1e-9 * anorm);
}

TEST(Hpl, GeneratorMatchesTheReferenceSequence) {
  // HPL_rand: state x1 = a * seed + c, value 0.5 - x / 2^64; the first entries
  // of HPL's matrix for seed 100 (computed with 64-bit modular arithmetic).
  const uint64_t a = 6364136223846793005ULL;
  uint64_t x = a * 100 + 1;
  hpl::Grid g;
  std::vector<double> col(5);
  hpl::generate_local_columns(g, 5, 2, hpl::kHplSeed, 0, 1, col.data(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(col[i], 0.5 - static_cast<double>(x) * 0x1p-64) << i;
    x = a * x + 1;
  }
  // A jump of k steps equals k single steps.
  uint64_t y = 12345;
  for (int i = 0; i < 1000; ++i) y = a * y + 1;
  EXPECT_EQ(hpl::jump_of(1000).apply(12345), y);
}

TEST(Hpl, GridMismatchIsAnError) {
  HplParams p;
  p.n = 10;
  p.nb = 4;
  p.p = 2;
  p.q = 2;
  try {
    run_hpl(world(), p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs that many ranks"), std::string::npos) << e.what();
  }
}

TEST(Hpl, HugeNIsRefusedWithAnEstimate) {
  HplParams p;
  p.n = 2000000;  // 32 TB
  p.nb = 256;
  try {
    run_hpl(world(), p);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("per rank"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qk::hpc

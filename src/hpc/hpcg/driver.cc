// run_hpcg: setup, validation, the reference convergence run, the timed CG
// sets and the rating (HPCG 3.1's main.cpp and ReportResults, condensed).
#include <fmt/format.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <thread>

#include "hpcg/cg.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/hpcg.h"

namespace qk::hpc {
namespace {

constexpr int kLevels = 4;
constexpr int kRefIters = 50;

struct Flops {
  double total = 0, ddot = 0, waxpby = 0, spmv = 0, mg = 0;
};

// HPCG's operation counts for `sets` sets of `iters` iterations each.
Flops count_flops(const hpcg::Level& a, double sets, double iters) {
  const double niters = sets * iters;
  const double nrow = static_cast<double>(a.global_rows), nnz = static_cast<double>(a.global_nnz);
  Flops f;
  f.ddot = (3.0 * niters + sets) * 2.0 * nrow;
  f.waxpby = (3.0 * niters + sets) * 2.0 * nrow;
  f.spmv = (niters + sets) * 2.0 * nnz;
  const hpcg::Level* l = &a;
  for (; l->coarse; l = l->coarse.get()) {
    const double lnnz = static_cast<double>(l->global_nnz);
    f.mg += niters * 4.0 * lnnz;  // pre-smoother
    f.mg += niters * 2.0 * lnnz;  // residual
    f.mg += niters * 4.0 * lnnz;  // post-smoother
  }
  f.mg += niters * 4.0 * static_cast<double>(l->global_nnz);  // coarsest sweep
  f.total = f.ddot + f.waxpby + f.spmv + f.mg;
  return f;
}

// Bytes the kernels must move per CG iteration (matrix: 8-byte value and
// 4-byte index per nonzero; vectors 8 bytes per entry and operand), a model
// for comparing with STREAM.
double bytes_per_iteration(const hpcg::Level& a) {
  const double nrow = static_cast<double>(a.global_rows);
  double bytes = 0;
  bytes += 12.0 * a.global_nnz + 2 * 8.0 * nrow;   // SpMV
  bytes += 3 * 2 * 8.0 * nrow + 3 * 3 * 8.0 * nrow;  // 3 dots, 3 waxpbys
  const hpcg::Level* l = &a;
  for (; l->coarse; l = l->coarse.get())
    bytes += 5 * (12.0 * l->global_nnz + 3 * 8.0 * l->global_rows);  // 4 sweeps + residual
  bytes += 2 * (12.0 * l->global_nnz + 3 * 8.0 * l->global_rows);
  return bytes;
}

}  // namespace

int64_t hpcg_bytes_per_rank(const HpcgParams& p) {
  double rows = 0, f = 1;
  for (int l = 0; l < kLevels; ++l, f /= 8) rows += double(p.nx) * p.ny * p.nz * f;
  // Matrix (27 x (8 + 4) bytes + row data) and about a dozen vectors.
  return static_cast<int64_t>(rows * (27 * 12 + 10 + 14 * 8));
}

HpcgResult run_hpcg(const Comm& world, const HpcgParams& p, const HpcgOptions& opt) {
  QK_CHECK(p.nx >= 16 && p.ny >= 16 && p.nz >= 16, "HPCG: local dimensions must be at least 16 ",
           "(got ", p.nx, " x ", p.ny, " x ", p.nz, ")");
  QK_CHECK(p.nx % 8 == 0 && p.ny % 8 == 0 && p.nz % 8 == 0, "HPCG: local dimensions ", p.nx,
           " x ", p.ny, " x ", p.nz, " must be multiples of 8 (three coarsenings by 2)");
  QK_CHECK(p.seconds >= 0, "HPCG: the run time must be >= 0, got ", p.seconds);
  const int node_ranks = ranks_on_this_node(world);
  {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    long long kb = 0;
    char key[64];
    long long v;
    char unit[16];
    while (f && std::fscanf(f, "%63s %lld %15s", key, &v, unit) == 3)
      if (std::string(key) == "MemAvailable:") kb = v;
    if (f) std::fclose(f);
    const double need = double(hpcg_bytes_per_rank(p)) * node_ranks;
    const int too_big = static_cast<int>(world.allreduce_max(double(kb > 0 && need > 0.85 * kb * 1024.0)));
    QK_CHECK(!too_big, "HPCG: a ", p.nx, " x ", p.ny, " x ", p.nz, " grid per rank needs about ",
             need / 1e9, " GB for the ", node_ranks, " rank(s) on this node, but only ",
             kb * 1024.0 / 1e9, " GB is available; choose smaller --nx/--ny/--nz");
  }
  // One thread per rank unless asked: the threaded SymGS meets its partner
  // threads once per plane, and where cores are time-shared (measured on the
  // 2-core development VM, docs/benchmarks.md) each meeting can cost a
  // scheduler slice; ranks (one per core, as HPCG is usually run) do not wait
  // on each other inside a sweep.
  set_num_threads(p.threads > 0 ? p.threads : 1);

  HpcgResult res;
  const double t_setup = MPI_Wtime();
  const hpcg::Geometry geo =
      hpcg::make_geometry(world.size(), world.rank(), p.nx, p.ny, p.nz, p.npx, p.npy, p.npz);
  res.npx = geo.npx, res.npy = geo.npy, res.npz = geo.npz;
  std::vector<double> b;
  auto a = hpcg::generate_problem(world, geo, kLevels, &b);
  res.global_rows = a->global_rows;
  res.global_nnz = a->global_nnz;
  res.setup_seconds = world.allreduce_max(MPI_Wtime() - t_setup);

  if (opt.inject_asymmetry && world.rank() == 0) {
    // Make A(0, j) differ from A(j, 0) for the first off-diagonal neighbour.
    const int s = a->diag_slot[0] == 0 ? 1 : 0;
    a->vals[s] *= 1.5;
  }
  // The optimized path's copy of the matrix (timed as setup, as HPCG times
  // OptimizeProblem); built after the injection so both paths see it.
  const double t_opt = MPI_Wtime();
  hpcg::optimize_problem(*a);
  res.setup_seconds += world.allreduce_max(MPI_Wtime() - t_opt);

  auto ref = hpcg::make_reference_kernels(world);
  auto optk = hpcg::make_optimized_kernels(world);
  hpcg::Kernels& k = p.reference ? *ref : *optk;
  res.path = p.reference ? "reference" : "optimized";

  // Validation on the path being rated.
  const hpcg::SymmetryTest sym = hpcg::test_symmetry(*a, k);
  res.symmetry_spmv = sym.spmv;
  res.symmetry_mg = sym.mg;
  res.symmetry_passed = sym.passed;
  const hpcg::CgTest cgt = hpcg::test_cg(*a, k, b);
  res.cg_unprec_iters = cgt.unprec_iters;
  res.cg_prec_iters = cgt.prec_iters;
  res.iterations_passed = cgt.passed;

  // The reference run sets the tolerance the timed path must reach.
  std::vector<double> x(a->ncol, 0.0);
  hpcg::CgResult rr = hpcg::cg(*a, *ref, b, x, kRefIters, 0.0, true, &res.ref_residual_history);
  res.ref_tolerance = rr.normr / rr.normr0;
  std::fill(x.begin(), x.end(), 0.0);
  hpcg::CgResult orr = hpcg::cg(*a, k, b, x, 10 * kRefIters, res.ref_tolerance, true);
  res.opt_iters = std::max(orr.iters, 1);

  // Timed sets of opt_iters iterations each, from x = 0, for at least `seconds`.
  k.times = {};
  world.barrier();
  const double t0 = MPI_Wtime();
  double last = t0;
  double worst_final = 0;
  for (;;) {
    std::fill(x.begin(), x.end(), 0.0);
    hpcg::CgResult r =
        hpcg::cg(*a, k, b, x, res.opt_iters, 0.0, true,
                 res.cg_sets == 0 ? &res.residual_history : nullptr);
    worst_final = std::max(worst_final, r.normr / r.normr0);
    ++res.cg_sets;
    const double now = MPI_Wtime();
    int stop = (opt.quick || now - t0 >= p.seconds) ? 1 : 0;
    world.bcast(&stop, sizeof stop, 0);  // rank 0's clock decides for everyone
    if (world.rank() == 0 && opt.progress_seconds > 0 && now - last >= opt.progress_seconds &&
        !stop) {
      last = now;
      std::fprintf(stderr, "qk hpcg: %d CG sets (%d iterations each) in %.0f of %.0f s\n",
                   res.cg_sets, res.opt_iters, now - t0, p.seconds);
    }
    if (stop) break;
  }
  res.seconds = world.allreduce_max(MPI_Wtime() - t0);

  const Flops f = count_flops(*a, res.cg_sets, res.opt_iters);
  res.gflops_raw = f.total / res.seconds / 1e9;
  auto rate = [&](double flops, double t) { return t > 0 ? flops / t / 1e9 : 0.0; };
  res.gflops_ddot = rate(f.ddot, world.allreduce_max(k.times.dot));
  res.gflops_waxpby = rate(f.waxpby, world.allreduce_max(k.times.waxpby));
  res.gflops_spmv = rate(f.spmv, world.allreduce_max(k.times.spmv));
  res.gflops_mg = rate(f.mg, world.allreduce_max(k.times.mg));
  // Convergence penalty: only the reference's 50 iterations per set count.
  res.rating_gflops = res.gflops_raw * double(kRefIters) / res.opt_iters;
  res.bandwidth_gbs = bytes_per_iteration(*a) * res.cg_sets * res.opt_iters / res.seconds / 1e9;
  res.final_residual = worst_final;
  res.valid = res.symmetry_passed && res.iterations_passed && std::isfinite(worst_final) &&
              worst_final <= res.ref_tolerance * 10;
  return res;
}

std::string format_hpcg_report(const HpcgParams& p, const HpcgResult& r, int ranks) {
  std::string s;
  s += fmt::format("{}\nqk hpcg: HPCG-compatible benchmark ({} path)\n{}\n", std::string(72, '='),
                   r.path, std::string(72, '='));
  s += fmt::format("Problem:        {} x {} x {} per rank, ranks {} = {} x {} x {}, {} levels\n",
                   p.nx, p.ny, p.nz, ranks, r.npx, r.npy, r.npz, kLevels);
  s += fmt::format("Global:         {} rows, {} nonzeros\n", r.global_rows, r.global_nnz);
  s += fmt::format("Setup:          {:.3f} s\n", r.setup_seconds);
  s += fmt::format("Validation:\n");
  s += fmt::format("  SpMV symmetry departure:   {:.4e} ({})\n", r.symmetry_spmv,
                   r.symmetry_spmv <= 1 ? "PASSED" : "FAILED");
  s += fmt::format("  MG symmetry departure:     {:.4e} ({})\n", r.symmetry_mg,
                   r.symmetry_mg <= 1 ? "PASSED" : "FAILED");
  s += fmt::format("  CG iterations, no precond: {} (expected <= 12)\n", r.cg_unprec_iters);
  s += fmt::format("  CG iterations, MG precond: {} (expected <= 2) -> {}\n", r.cg_prec_iters,
                   r.iterations_passed ? "PASSED" : "FAILED");
  s += fmt::format("Convergence:    reference reaches {:.4e} in 50 iterations; this path needs {}\n",
                   r.ref_tolerance, r.opt_iters);
  s += fmt::format("Benchmark:      {} CG sets of {} iterations in {:.2f} s, final residual {:.4e}\n",
                   r.cg_sets, r.opt_iters, r.seconds, r.final_residual);
  s += fmt::format("GFLOP/s:        DDOT {:.3f}  WAXPBY {:.3f}  SpMV {:.3f}  MG {:.3f}  total {:.3f}\n",
                   r.gflops_ddot, r.gflops_waxpby, r.gflops_spmv, r.gflops_mg, r.gflops_raw);
  s += fmt::format("Memory traffic: {:.2f} GB/s (model: 12 bytes per nonzero, 8 per vector entry)\n",
                   r.bandwidth_gbs);
  s += fmt::format("{}\nHPCG result is {} with a GFLOP/s rating of: {:.4f}\n{}\n",
                   std::string(72, '-'), r.valid ? "VALID" : "INVALID", r.rating_gflops,
                   std::string(72, '='));
  return s;
}

}  // namespace qk::hpc

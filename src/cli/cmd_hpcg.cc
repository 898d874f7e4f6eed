// `qk hpcg`: the High Performance Conjugate Gradients benchmark (docs/hpc.md).
//
//   qk hpcg                              # 104^3 per rank, 60 s, optimized kernels
//   qk hpcg --nx 32 --ny 32 --nz 32 --rt 10 --reference
//   mpirun -np 8 qk hpcg --nx 64 --ny 64 --nz 64
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "command.h"
#include "qk/base/error.h"
#include "qk/hpc/comm.h"
#include "qk/hpc/hpcg.h"

namespace qk::cli {
namespace {

struct HpcgCliOptions {
  int nx = 104, ny = 104, nz = 104;
  int npx = 0, npy = 0, npz = 0;
  double seconds = 60;
  bool reference = false;
  int threads = 0;
  double progress = 10;
  bool inject_asymmetry = false;
};

void setup_hpcg(CLI::App& app) {
  auto o = std::make_shared<HpcgCliOptions>();
  app.add_option("--nx", o->nx, "Local grid points along x per rank (multiple of 8, >= 16)")
      ->check(CLI::Range(16, 4096))->capture_default_str();
  app.add_option("--ny", o->ny, "Local grid points along y")->check(CLI::Range(16, 4096))
      ->capture_default_str();
  app.add_option("--nz", o->nz, "Local grid points along z")->check(CLI::Range(16, 4096))
      ->capture_default_str();
  app.add_option("--npx", o->npx, "Process grid along x (0: automatic)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--npy", o->npy, "Process grid along y (0: automatic)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--npz", o->npz, "Process grid along z (0: automatic)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--rt", o->seconds, "Seconds of timed CG sets (at least one set runs)")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  app.add_flag("--reference", o->reference, "Time the reference kernels instead of the optimized");
  app.add_option("--threads", o->threads,
                 "Threads per rank for the optimized kernels (0: one; use ranks for cores)")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--progress", o->progress, "Seconds between progress lines (0: none)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--inject-asymmetry", o->inject_asymmetry,
               "Perturb one matrix entry, to see the symmetry test fail")
      ->group("");
  app.callback([o] {
    hpc::MpiSession mpi;
    hpc::Comm world = hpc::Comm::world();
    hpc::HpcgParams p;
    p.nx = o->nx, p.ny = o->ny, p.nz = o->nz;
    p.npx = o->npx, p.npy = o->npy, p.npz = o->npz;
    p.seconds = o->seconds;
    p.reference = o->reference;
    p.threads = o->threads;
    hpc::HpcgOptions opt;
    opt.progress_seconds = o->progress;
    opt.inject_asymmetry = o->inject_asymmetry;
    hpc::HpcgResult r;
    try {
      r = hpc::run_hpcg(world, p, opt);
    } catch (const Error& e) {
      if (world.size() == 1) throw;
      // Argument errors are seen by every rank alike: let rank 0 report them.
      if (world.rank() == 0)
        std::fprintf(stderr, "qk hpcg: error: %s\n", e.message().c_str());
      exit_with(1);
    }
    if (world.rank() == 0) fmt::print("{}", hpc::format_hpcg_report(p, r, world.size()));
    if (!r.valid) exit_with(1);
  });
}

}  // namespace

QK_REGISTER_COMMAND(hpcg, "Run the HPCG (conjugate gradients) benchmark", setup_hpcg);

}  // namespace qk::cli

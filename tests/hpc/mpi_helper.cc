// Runs one HPL or HPCG case on MPI_COMM_WORLD for the multi-rank tests:
//   mpirun -np 4 qk_hpc_mpi_helper hpl n=257 nb=32 p=2 q=2 depth=1 bcast=1
// Rank 0 prints "RESULT passed=<0|1> scaled=<residual>"; exit 0 when PASSED,
// 1 when FAILED, 2 on an error (printed).
//
// Only rank 0 exits with the verdict, after flushing what it printed: when a
// rank exits non-zero, mpirun kills the others at once. Every rank used to
// exit 1 on a failed check, and where Open MPI gives the ranks a pipe rather
// than a pty (a chroot without /dev/pts), rank 0's stdout is fully buffered:
// a rank 0 still between MPI_Finalize and its exit (a loaded machine) was
// killed with the RESULT line the test looks for unwritten. (Reproduced by
// delaying rank 0's exit with stdout fully buffered: RESULT lost every time
// before this change, kept after.)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "qk/base/error.h"
#include "qk/hpc/comm.h"
#include "qk/hpc/hpcg.h"
#include "qk/hpc/hpl.h"

namespace {

std::map<std::string, std::string> parse_kv(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    const std::string_view s = argv[i];
    const size_t eq = s.find('=');
    // A bare key means key=1.
    kv.insert_or_assign(std::string(s.substr(0, eq)), eq == std::string_view::npos ? std::string(1, '1')
                                                                                    : std::string(s.substr(eq + 1)));
  }
  return kv;
}

long get(const std::map<std::string, std::string>& kv, const char* k, long def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::atol(it->second.c_str());
}

int run_hpl_case(const qk::hpc::Comm& world, const std::map<std::string, std::string>& kv) {
  qk::hpc::HplParams p;
  p.n = get(kv, "n", 100);
  p.nb = static_cast<int>(get(kv, "nb", 32));
  p.p = static_cast<int>(get(kv, "p", 1));
  p.q = static_cast<int>(get(kv, "q", 1));
  p.depth = static_cast<int>(get(kv, "depth", 1));
  p.bcast = static_cast<qk::hpc::HplBcast>(get(kv, "bcast", 1));
  p.pfact = static_cast<qk::hpc::HplFact>(get(kv, "pfact", 2));
  p.rfact = static_cast<qk::hpc::HplFact>(get(kv, "rfact", 1));
  p.nbmin = static_cast<int>(get(kv, "nbmin", 4));
  p.ndiv = static_cast<int>(get(kv, "ndiv", 2));
  p.row_major = get(kv, "pmap", 0) == 0;
  qk::hpc::HplOptions opt;
  opt.inject_fault = get(kv, "fault", 0) != 0;
  opt.blas_threads = 1;
  opt.progress_seconds = 0;
  auto r = qk::hpc::run_hpl(world, p, opt);
  if (world.rank() == 0) {
    std::printf("RESULT passed=%d scaled=%.6e gflops=%.3f\n", r.passed ? 1 : 0, r.scaled_residual,
                r.gflops);
    // The solution, for comparing grids with each other.
    double sum = 0;
    for (double v : r.x) sum += v;
    std::printf("XSUM %.17g\n", sum);
    std::fflush(stdout);
    return r.passed ? 0 : 1;
  }
  return 0;
}

int run_hpcg_case(const qk::hpc::Comm& world, const std::map<std::string, std::string>& kv) {
  qk::hpc::HpcgParams p;
  p.nx = static_cast<int>(get(kv, "nx", 16));
  p.ny = static_cast<int>(get(kv, "ny", p.nx));
  p.nz = static_cast<int>(get(kv, "nz", p.nx));
  p.reference = get(kv, "ref", 0) != 0;
  p.threads = static_cast<int>(get(kv, "threads", 1));
  p.seconds = static_cast<double>(get(kv, "rt", 0));  // 0: one timed set
  qk::hpc::HpcgOptions opt;
  opt.quick = p.seconds == 0;
  opt.progress_seconds = 0;
  opt.inject_asymmetry = get(kv, "asym", 0) != 0;
  auto r = qk::hpc::run_hpcg(world, p, opt);
  if (world.rank() == 0) {
    std::printf("RESULT valid=%d sym_spmv=%.3e sym_mg=%.3e unprec=%d prec=%d iters=%d grid=%dx%dx%d "
                "rating=%.4f sets=%d seconds=%.2f\n",
                r.valid ? 1 : 0, r.symmetry_spmv, r.symmetry_mg, r.cg_unprec_iters,
                r.cg_prec_iters, r.opt_iters, r.npx, r.npy, r.npz, r.rating_gflops, r.cg_sets,
                r.seconds);
    std::printf("HISTORY");
    for (double h : r.residual_history) std::printf(" %.17g", h);
    std::printf("\n");
    std::fflush(stdout);
    return r.valid ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  qk::hpc::MpiSession mpi(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: qk_hpc_mpi_helper hpl|hpcg key=value...\n");
    return 2;
  }
  auto kv = parse_kv(argc, argv);
  try {
    auto world = qk::hpc::Comm::world();
    std::string what = argv[1];
    if (what == "hpl") return run_hpl_case(world, kv);
    if (what == "hpcg") return run_hpcg_case(world, kv);
    std::fprintf(stderr, "unknown case %s\n", what.c_str());
    return 2;
  } catch (const qk::Error& e) {
    std::fprintf(stderr, "ERROR %s\n", e.what());
    // Another rank may be waiting in a collective; take the whole job down.
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
}

// `qk hpl`: the High-Performance Linpack benchmark (see docs/hpc.md).
//
//   qk hpl                          # N=1000 NB=192 on one rank
//   qk hpl HPL.dat                  # the netlib input file, all its combinations
//   mpirun -np 4 qk hpl -n 20000 --nb 192 -P 2 -Q 2
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/comm.h"
#include "qk/hpc/hpl.h"

namespace qk::cli {
namespace {

struct HplCliOptions {
  std::string dat;
  std::vector<int64_t> ns{1000};
  std::vector<int> nbs{192};
  int p = 1, q = 1;
  std::string pmap = "row";
  std::vector<int> pfacts{2}, rfacts{1}, nbmins{4}, ndivs{2}, bcasts{1}, depths{1};
  int swap = 2;
  double threshold = 16.0;
  int threads = 0;
  double progress = 10.0;
  bool inject_fault = false;
};

hpc::HplDat dat_from_flags(const HplCliOptions& o) {
  hpc::HplDat d;
  d.ns = o.ns;
  d.nbs = o.nbs;
  d.row_major = o.pmap == "row";
  d.grids = {{o.p, o.q}};
  d.threshold = o.threshold;
  for (int v : o.pfacts) d.pfacts.push_back(static_cast<hpc::HplFact>(v));
  for (int v : o.rfacts) d.rfacts.push_back(static_cast<hpc::HplFact>(v));
  for (int v : o.bcasts) d.bcasts.push_back(static_cast<hpc::HplBcast>(v));
  d.nbmins = o.nbmins;
  d.ndivs = o.ndivs;
  d.depths = o.depths;
  d.swap = o.swap;
  return d;
}

void run_hpl_cmd(const HplCliOptions& o) {
  hpc::MpiSession mpi;
  hpc::Comm world = hpc::Comm::world();
  const bool root = world.rank() == 0;
  hpc::HplDat dat;
  if (!o.dat.empty()) {
    std::string text;
    try {
      text = read_file(o.dat);
    } catch (const Error& e) {
      QK_THROW(IoError, "cannot read the HPL input file '", o.dat, "': ", e.message());
    }
    dat = hpc::parse_hpl_dat(text, o.dat);
  } else {
    dat = dat_from_flags(o);
  }
  const auto runs = dat.runs();
  // Every rank sees the same grids, so this is a clean, collective refusal.
  for (const auto& r : runs)
    QK_CHECK(int64_t(r.p) * r.q == world.size(), "the grid P x Q = ", r.p, " x ", r.q,
             " needs ", int64_t(r.p) * r.q, " ranks, but this job has ", world.size(),
             "; run it as `mpirun -np ", int64_t(r.p) * r.q, " qk hpl ...` or change P and Q");

  std::FILE* out = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(nullptr, &std::fclose);
  if (dat.device_out == 7) {
    out = stderr;
  } else if (dat.device_out != 6 && root) {
    file.reset(std::fopen(dat.out_file.c_str(), "w"));
    QK_CHECK_AS(IoError, file != nullptr, "cannot open the HPL output file '", dat.out_file, "'");
    out = file.get();
  }
  hpc::HplOptions opt;
  opt.blas_threads = o.threads;
  opt.progress_seconds = o.progress;
  opt.inject_fault = o.inject_fault;
  if (root) {
    fmt::print(out, "{}\nqk hpl: HPLinpack-compatible benchmark, {} rank(s), {} test(s)\n",
               std::string(80, '='), world.size(), runs.size());
    fmt::print(out, "Gflops = (2/3 N^3 + 3/2 N^2) / Time; PASSED when the scaled residual < {}\n",
               dat.threshold);
  }
  int passed = 0, failed = 0;
  for (const auto& r : runs) {
    hpc::HplResult res;
    try {
      res = hpc::run_hpl(world, r, opt);
    } catch (const Error& e) {
      if (world.size() == 1) throw;
      // Other ranks may be inside a collective: report and end the whole job.
      std::fprintf(stderr, "qk hpl: error on rank %d: %s\n", world.rank(), e.message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    (res.passed ? passed : failed)++;
    if (root) {
      fmt::print(out, "{}", hpc::format_hpl_header());
      fmt::print(out, "{}", hpc::format_hpl_result(r, res));
      std::fflush(out);
    }
  }
  if (root)
    fmt::print(out,
               "{}\nFinished {:6} tests with the following results:\n         {:6} tests "
               "completed and passed residual checks,\n         {:6} tests completed and failed "
               "residual checks.\n{}\nEnd of Tests.\n{}\n",
               std::string(80, '='), runs.size(), passed, failed, std::string(80, '-'),
               std::string(80, '='));
  if (failed > 0) exit_with(1);
}

void setup_hpl(CLI::App& app) {
  auto o = std::make_shared<HplCliOptions>();
  app.add_option("dat", o->dat, "An HPL.dat input file (netlib format); overrides the flags")
      ->check(CLI::ExistingFile);
  app.add_option("-n,--n", o->ns, "Problem sizes N (several run one after another)")
      ->check(CLI::PositiveNumber)->delimiter(',')->capture_default_str();
  app.add_option("--nb", o->nbs, "Block sizes NB")->check(CLI::Range(1, 4096))->delimiter(',')
      ->capture_default_str();
  app.add_option("-P", o->p, "Process rows")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("-Q", o->q, "Process columns")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--pmap", o->pmap, "Rank to grid mapping")
      ->check(CLI::IsMember({"row", "column"}))->capture_default_str();
  app.add_option("--pfact", o->pfacts, "PFACT: 0 left, 1 Crout, 2 right")
      ->check(CLI::Range(0, 2))->delimiter(',')->capture_default_str();
  app.add_option("--rfact", o->rfacts, "RFACT: 0 left, 1 Crout, 2 right")
      ->check(CLI::Range(0, 2))->delimiter(',')->capture_default_str();
  app.add_option("--nbmin", o->nbmins, "Recursion stops at this many columns")
      ->check(CLI::Range(1, 4096))->delimiter(',')->capture_default_str();
  app.add_option("--ndiv", o->ndivs, "Sub-panels per recursion level")
      ->check(CLI::Range(2, 64))->delimiter(',')->capture_default_str();
  app.add_option("--bcast", o->bcasts, "BCAST: 0 1ring, 1 1ringM, 2 2ring, 3 2ringM")
      ->check(CLI::Range(0, 3))->delimiter(',')->capture_default_str();
  app.add_option("--depth", o->depths, "Look-ahead depth: 0 or 1")
      ->check(CLI::Range(0, 1))->delimiter(',')->capture_default_str();
  app.add_option("--swap", o->swap, "SWAP (recorded; see docs/hpc.md)")
      ->check(CLI::Range(0, 2))->capture_default_str();
  app.add_option("--threshold", o->threshold, "Residual threshold for PASSED")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o->threads, "OpenBLAS threads per rank (0: cores / ranks per node)")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--progress", o->progress, "Seconds between progress lines (0: none)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--inject-fault", o->inject_fault,
               "Corrupt one trailing update, to see the residual check fail")
      ->group("");  // hidden: for testing the check
  app.callback([o] {
    run_hpl_cmd(*o);
  });
}

}  // namespace

QK_REGISTER_COMMAND(hpl, "Run the HPL (High-Performance Linpack) benchmark", setup_hpl);

}  // namespace qk::cli

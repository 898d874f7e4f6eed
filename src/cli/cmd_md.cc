// `qk md`: molecular dynamics from GROMACS inputs, grompp and mdrun in one
// step (docs/md.md). The options are GROMACS's, single-dash:
//
//   qk md -f run.mdp -c conf.gro -p topol.top [-deffnm NAME] [-nsteps N] [-nt THREADS]
//   qk run --nproc-per-node 2 -- qk md ...      (the forces shared out over 2 processes)
//
// CLI11 only hands the arguments over; qk::md::parse_mdrun_args reads them
// and qk::md::mdrun does the work (both tested in tests/hpc/md).
#include <cstdio>
#include <iostream>

#include "command.h"
#include "qk/dist/launch_env.h"
#include "qk/dist/process_group.h"
#include "qk/hpc/md/mdrun.h"

namespace qk::cli {
namespace {

void setup_md(CLI::App& app) {
  app.set_help_flag();
  app.allow_extras();
  app.prefix_command();
  app.footer("GROMACS's options: -f -c -p -deffnm -g -e -o -trr -x -cpo -cpi -cpt -nsteps -nt -double; run 'qk md -h' for them.");
  app.callback([&app] {
    const md::MdrunArgs args = md::parse_mdrun_args(app.remaining());
    if (args.help) {
      std::fputs(md::mdrun_help("qk md").c_str(), stdout);
      return;
    }
    // Under qk run (or mpirun, srun) with several ranks: the forces shared out over them (md::ForceShare),
    // summed by an all-reduce of the process group; the first rank prints and writes.
    md::ForceShare share;
    std::ostream nowhere(nullptr);
    std::ostream* out = &std::cout;
    if (dist::launch_env().world_size > 1) {
      dist::init();
      share.rank = dist::rank();
      share.size = dist::world_size();
      share.allreduce_sum = [](double* data, int64_t count) {
        dist::group().all_reduce(from_blob(data, {count}, DType::f64));
      };
      // The step's sums then as rank 0 has them: an all-reduce may add in an order that depends on the
      // rank, and the ranks must hold the same state to the bit.
      share.broadcast_first = [](double* data, int64_t count) {
        dist::group().broadcast(from_blob(data, {count}, DType::f64), 0);
      };
      if (share.rank != 0) out = &nowhere;
    }
    md::mdrun(args, *out, share);
  });
}

}  // namespace

QK_REGISTER_COMMAND(md, "Molecular dynamics from GROMACS inputs (grompp + mdrun in one step)", setup_md);

}  // namespace qk::cli

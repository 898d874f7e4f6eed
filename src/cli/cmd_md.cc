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
#include "qk/hpc/md/mdrun.h"
#include "qk/hpc/md/process_share.h"

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
    // Under qk run with several ranks: the forces shared out over them; the first prints and writes.
    const md::ForceShare share = md::process_share();
    std::ostream nowhere(nullptr);
    std::ostream* out = share.rank == 0 ? &std::cout : &nowhere;
    md::mdrun(args, *out, share);
  });
}

}  // namespace

QK_REGISTER_COMMAND(md, "Molecular dynamics from GROMACS inputs (grompp + mdrun in one step)", setup_md);

}  // namespace qk::cli

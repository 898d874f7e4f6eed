// qk md without the rest of the CLI: `md_run -f md.mdp -c em.gro -p topol.top -nsteps 500 -nt 2`
// runs qk::md::mdrun (the library behind `qk md`, same options) so bench/md_vs_gromacs.sh
// can time it against `gmx mdrun` on the same box without building the whole qk binary.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "qk/base/error.h"
#include "qk/hpc/md/mdrun.h"

int main(int argc, char** argv) {
  try {
    const qk::md::MdrunArgs args = qk::md::parse_mdrun_args(std::vector<std::string>(argv + 1, argv + argc));
    if (args.help) {
      std::fputs(qk::md::mdrun_help("md_run").c_str(), stdout);
      return 0;
    }
    qk::md::mdrun(args, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "md_run: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// What `qk md` does, as a library call: GROMACS's grompp and mdrun in one
// step, from the files a GROMACS user already has.
//
//   qk::md::MdrunArgs a = qk::md::parse_mdrun_args({"-f", "run.mdp", "-c", "conf.gro", "-p", "topol.top",
//                                                   "-deffnm", "water", "-nsteps", "1000", "-nt", "2"});
//   qk::md::mdrun(a, std::cout);   // writes water.log (md.log's energy blocks) and water.gro
//
// Options (GROMACS's spelling, one dash): -f run parameters (.mdp, default
// grompp.mdp), -c start coordinates (.gro, default conf.gro), -p topology
// (.top, default topol.top), -deffnm NAME (outputs NAME.log and NAME.gro;
// default md.log and confout.gro), -g log file, -o final coordinates,
// -nsteps N (overrides the mdp; -1 keeps it), -nt THREADS (0: QK_NUM_THREADS
// or one per core), -double (as gmx_d; default mixed precision as gmx), -h.
// Anything else is an error naming the option.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "qk/hpc/md/md.h"

namespace qk::md {

struct MdrunArgs {
  std::string mdp = "grompp.mdp";
  std::string conf = "conf.gro";
  std::string top = "topol.top";
  std::string index;  // -n: an index file whose groups join the default ones (tc-grps)
  std::string restraint;  // -r: the position restraints' reference structure (default: -c's)
  std::string log = "md.log";
  std::string confout = "confout.gro";
  std::string trajectory = "traj.trr";  // written when the mdp's nstxout / nstvout / nstfout ask
  std::string compressed_trajectory = "traj_comp.xtc";  // written when nstxout-compressed asks
  std::string energy_file = "ener.edr";  // -e: md.log's energies for gmx energy (MD)
  std::string checkpoint = "state.cpt";  // -cpo: the checkpoint folder (qk/base/checkpoint_dir.h)
  std::string resume;                    // -cpi: go on from the newest checkpoint there, if any
  double checkpoint_minutes = 15;        // -cpt: every so many minutes (0: only before the last step; < 0: never)
  int64_t nsteps = -1;
  int threads = 0;
  Precision precision = Precision::kMixed;  // -double: kDouble
  MdDevice nonbonded = MdDevice::kCpu;  // -nb cpu|gpu
  MdDevice pme = MdDevice::kCpu;        // -pme cpu|gpu
  RunOptions::Decomposition decomposition = RunOptions::Decomposition::kAuto;  // -decomp auto|domains|forces
  bool help = false;
};

MdrunArgs parse_mdrun_args(const std::vector<std::string>& argv);
std::string mdrun_help(const std::string& program);

// Reads the inputs, runs, writes the log and the final coordinates; prints
// a short account (the inputs, then mdrun's closing Performance lines) to `out`.
// With a share over several ranks (ForceShare, forces.h; `qk run ... -- qk md`)
// every rank runs and only rank 0 writes files (each reads a -cpi checkpoint).
RunResult mdrun(const MdrunArgs& args, std::ostream& out, const ForceShare& share = {});

}  // namespace qk::md

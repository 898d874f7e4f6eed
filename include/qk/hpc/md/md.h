// Running a simulation: leap-frog MD or steepest-descent minimization, as
// GROMACS's mdrun does them, on a topology, run parameters and coordinates.
//
//   qk::md::Topology top = qk::md::read_top("topol.top");
//   qk::md::MdpOptions mdp = qk::md::read_mdp("run.mdp");
//   qk::md::GroFile conf = qk::md::read_gro("conf.gro");
//   std::ofstream log("md.log");
//   qk::md::RunOptions opt;
//   opt.log = &log;                                  // energy blocks as md.log has them
//   qk::md::RunResult r = qk::md::run(top, mdp, conf, opt);
//   // r.frames (every nstenergy steps and the last), r.final_conf, r.ns_per_day
//
// MD (integrator = md): SETTLE constrains the start (GROMACS's
// do_constrain_first) unless continuation = yes; each step computes forces,
// updates v and x by leap-frog (V-rescale scales v on coupling steps),
// constrains, and reports the kinetic energy as the average of the two
// half-step kinetic energies around the step (GROMACS's leap-frog average), the
// temperature over 3N - constraints - 3 degrees of freedom, and the pressure
// from that kinetic energy and the force + constraint virial. The centre of
// mass velocity is removed every nstcomm steps.
// Minimization (integrator = steep): GROMACS's steepest descent: a step of
// emstep / Fmax along the forces, grown by 1.2 when the energy falls and halved
// when it does not, until Fmax < emtol or nsteps. As in GROMACS, every mass is 1
// there, and with SETTLE the forces lose their components along the
// constraints before Fmax and the step are taken.
#pragma once

#include <cstdint>
#include <ostream>
#include <optional>
#include <string>
#include <vector>

#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"

namespace qk::md {

struct EnergyFrame {
  int64_t step = 0;
  double time = 0;  // ps
  PotentialTerms potential;
  double kinetic = 0, total = 0, conserved = 0, temperature = 0;
  double pressure = 0;  // bar, Pres. DC included
  Mat3 pressure_tensor{};
  Mat3 virial{};  // MD: -1/2 sum r (x) F, constraints and dispersion correction included (kJ/mol)
  double box_z = 0;  // nm (GROMACS's #Surf*SurfTen term)
  Vec3 box{};        // nm, the step's box (it changes under pressure coupling)
  std::optional<double> constr_rmsd;  // with LINCS constraints: their RMS relative deviation after the step
  // MD: per T-coupling group (the mdp's tc-grps): its temperature and the V-rescale factor of this step's
  // update (1 when it did not couple), as the .edr's T-<group> and Lamb-<group>.
  std::vector<std::string> group_names;
  std::vector<double> group_temperature, group_lambda;
  double fmax = 0;  // minimization: the largest force, kJ mol^-1 nm^-1
  int fmax_atom = -1;
};

struct RunOptions {
  int64_t nsteps = -1;          // -1: the mdp's nsteps
  // A GROMACS index file (.ndx, mdrun's -n): its groups join the default ones for tc-grps. Empty: none.
  std::string index_file;
  // The position restraints' reference structure (grompp's -r); null: the start coordinates.
  const GroFile* restraint_reference = nullptr;
  std::ostream* log = nullptr;  // md.log text: energy blocks every nstenergy steps, the performance lines
  // MD: a line "step N (x%), will finish at HH:MM:SS" every progress_seconds of wall time (and at the end), as
  // mdrun prints to its terminal. Null: none.
  std::ostream* progress = nullptr;
  double progress_seconds = 10;
  // kMixed, as gmx mdrun: the short-range pair forces in float (forces.h); kDouble as gmx_d.
  Precision precision = Precision::kMixed;
  // MD: the .trr (trr.h) written on the steps the mdp's nstxout / nstvout / nstfout ask for (x(t), the
  // leap-frog's v(t - dt/2) and f(t), as mdrun writes them; reals as the precision). Empty: no trajectory;
  // nor when all three are 0 (the file is then not created).
  std::string trajectory;
  // MD: the .xtc (xtc.h) of x(t) every nstxout-compressed steps at compressed-x-precision. Empty: none.
  std::string compressed_trajectory;
  // MD: the energy file (.edr, edr.h) with md.log's terms on the same steps. Empty: none.
  std::string energy_file;
  // MD checkpoints: the state at the start of a step in a crash-safe checkpoint folder (x, v(t - dt/2),
  // the thermostat's generator, the outputs' sizes; the newest two kept) every checkpoint_every_steps
  // steps and/or checkpoint_every_minutes, and before the last step. Empty: none.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_minutes = 0;
  // Several processes computing the forces together (forces.h's ForceShare; size 1: this one alone). Every
  // rank runs the same steps on the same totals; give the outputs (log, files, checkpoints) to one rank only.
  ForceShare share;
  // How several ranks share an MD run. kDomains: each owns a slab across the box's longest axis, or a cell of a
  // grid across its two longest (domain_decomposition.h in src/hpc/md: its molecules, integrated there, and a
  // halo from its neighbours),
  // which needs the share's exchange, MD with fixed-interval pair lists (a verlet-buffer-tolerance), the CPU
  // kernels, and slabs at least the list radius wide; kForces: every rank holds every atom and the forces are
  // summed (ForceShare); kAuto: domains where they can be, else forces (RunResult::decomposition says which
  // and why; with kAuto, slabs that grow too thin mid-run hand over to forces, noted there and in the log).
  // Checkpoints with domains are taken at the next pair-list step after they fall due.
  enum class Decomposition { kAuto, kDomains, kForces };
  Decomposition decomposition = Decomposition::kAuto;
  // Where the pair list's interactions run (forces.h; mdrun's -nb): the CPU, or a GPU beside it.
  MdDevice nonbonded = MdDevice::kCpu;
  // Where PME runs (forces.h; mdrun's -pme): the CPU, or a GPU (one rank).
  MdDevice pme = MdDevice::kCpu;
  // Resume from the newest valid checkpoint in this folder (none there, or empty: start afresh). The
  // trajectories are cut back to their sizes at the checkpoint and appended to; the log is the caller's
  // stream (qk md's mdrun cuts md.log back the same way). The run then equals one that was never stopped.
  std::string resume_from;
};

struct RunResult {
  std::vector<EnergyFrame> frames;  // MD: steps that are multiples of nstenergy, and the last; steep: each accepted step
  GroFile final_conf;               // positions (and velocities for MD) at the last step
  int64_t steps = 0;
  int64_t first_step = 0;  // MD: the step a resumed run went on from (0 otherwise)
  double wall_seconds = 0;
  double ns_per_day = 0, hours_per_ns = 0;  // MD only
  bool converged = false;                   // steep: Fmax < emtol
  int64_t pair_list_builds = 0;             // how often the Verlet list was rebuilt (forces.h)
  int64_t pair_list_prunes = 0;             // and cut to its inner buffer
  int64_t pairs_in_list = 0;                // in the last list
  // MD: where the wall time went (md.log's time accounting table, as mdrun's): the force parts
  // (forces.h) and, per step, the leap-frog update, the constraints and the outputs (trajectories,
  // energies, log, checkpoints); `rest` is what none of them covers.
  ForceTimes force_times;
  double update_seconds = 0, constraint_seconds = 0, output_seconds = 0, rest_seconds = 0;
  // With domains: repartitioning (every atom gathered, the slabs and halos made anew) and the per-step sums of
  // the kinetic energy and constraint virial over the ranks.
  double decomposition_seconds = 0;
  // With several ranks: how they shared the run, a line for md.log ("domain decomposition: ..." or "force
  // decomposition: ..." with why not domains). Empty alone.
  std::string decomposition;
};

RunResult run(const Topology& top, const MdpOptions& mdp, const GroFile& conf, const RunOptions& options = {});

// The pair list run() keeps for these inputs: GROMACS's buffers and intervals from verlet-buffer-tolerance
// (sized for the thermostat's reference temperature, or without one the start's), or exact lists.
PairListSetup pair_list_setup(const Topology& top, const MdpOptions& mdp, const GroFile& conf);
// With several ranks (options.share.size > 1): how run() shares the work among them, the line it puts in
// RunResult::decomposition (domains, or the forces shared out and why); empty alone.
std::string describe_decomposition(const Topology& top, const MdpOptions& mdp, const GroFile& conf,
                                   const RunOptions& options);
// Why run() cannot decompose this run into domains over options.share's ranks; empty when it can.
std::string why_not_domains(const Topology& top, const MdpOptions& mdp, const GroFile& conf,
                            const RunOptions& options);
// As mdrun's log says it: the intervals and radii, one line each, indented by two spaces.
std::string describe_pair_lists(const PairListSetup& lists, const MdpOptions& mdp);

// Degrees of freedom for the temperature, as grompp counts them (tc_groups, the system as one group): 3 per
// atom with a mass, less the constraints, less 3 with centre-of-mass removal.
double degrees_of_freedom(const Topology& top, const MdpOptions& mdp);

}  // namespace qk::md

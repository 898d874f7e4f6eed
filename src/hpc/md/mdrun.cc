// mdrun(): read GROMACS inputs, run, write md.log and the final .gro.
#include "qk/hpc/md/mdrun.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

#include "index_groups.h"
#include "lincs.h"
#include "md_checkpoint.h"
#include "md_log.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/md/units.h"
#include "tc_groups.h"

namespace qk::md {

namespace {

// The output files mdrun names: the option, the argument it sets, its name under -deffnm NAME.
struct OutputOption {
  const char* opt;
  std::string MdrunArgs::*file;
  const char* extension;
};
constexpr OutputOption kOutputs[] = {
    {"-g", &MdrunArgs::log, ".log"},         {"-o", &MdrunArgs::confout, ".gro"},
    {"-trr", &MdrunArgs::trajectory, ".trr"}, {"-x", &MdrunArgs::compressed_trajectory, ".xtc"},
    {"-e", &MdrunArgs::energy_file, ".edr"}, {"-cpo", &MdrunArgs::checkpoint, ".cpt"},
};

}  // namespace

MdrunArgs parse_mdrun_args(const std::vector<std::string>& argv) {
  MdrunArgs a;
  std::set<std::string> given;  // the outputs named on the command line: -deffnm leaves them
  std::string deffnm;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& opt = argv[i];
    if (opt == "-h" || opt == "--help" || opt == "-help") {
      a.help = true;
      continue;
    }
    if (opt == "-double") {  // gmx_d's precision in the same binary
      a.precision = Precision::kDouble;
      continue;
    }
    QK_CHECK(i + 1 < argv.size(), opt, " needs a value (qk md -h lists the options)");
    const std::string& value = argv[++i];
    // The whole value as a number (std::stoll or std::stod), or an error naming the option.
    auto number = [&](auto parse, const char* what) {
      size_t used = 0;
      decltype(parse(value, &used)) v{};
      try {
        v = parse(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      QK_CHECK(used == value.size() && !value.empty(), opt, " expects ", what, ", got '", value, "'");
      return v;
    };
    auto integer = [&](const char* what) {
      return number([](const std::string& t, size_t* used) { return std::stoll(t, used); }, what);
    };
    if (const auto out = std::find_if(std::begin(kOutputs), std::end(kOutputs),
                                      [&](const OutputOption& o) { return opt == o.opt; });
        out != std::end(kOutputs)) {
      a.*(out->file) = value;
      given.insert(opt);
    } else if (opt == "-f") {
      a.mdp = value;
    } else if (opt == "-c") {
      a.conf = value;
    } else if (opt == "-p") {
      a.top = value;
    } else if (opt == "-n") {
      a.index = value;
    } else if (opt == "-r") {
      a.restraint = value;
    } else if (opt == "-deffnm") {
      deffnm = value;
    } else if (opt == "-cpi") {
      a.resume = value;
    } else if (opt == "-cpt") {
      a.checkpoint_minutes = number([](const std::string& t, size_t* used) { return std::stod(t, used); }, "minutes");
    } else if (opt == "-nsteps") {
      a.nsteps = integer("a step count (-1: the mdp's)");
      QK_CHECK(a.nsteps >= -1, "-nsteps must be >= -1, got ", a.nsteps);
    } else if (opt == "-nb" || opt == "-pme") {
      QK_CHECK(value == "cpu" || value == "gpu", opt, ": expected cpu or gpu, got '", value, "'");
      (opt == "-nb" ? a.nonbonded : a.pme) = value == "gpu" ? MdDevice::kGpu : MdDevice::kCpu;
    } else if (opt == "-decomp") {
      QK_CHECK(value == "auto" || value == "domains" || value == "forces",
               "-decomp: expected auto, domains or forces, got '", value, "'");
      a.decomposition = value == "domains"  ? RunOptions::Decomposition::kDomains
                        : value == "forces" ? RunOptions::Decomposition::kForces
                                            : RunOptions::Decomposition::kAuto;
    } else if (opt == "-nt") {
      long long nt = integer("a thread count");
      QK_CHECK(nt >= 0 && nt <= 4096, "-nt must be 0..4096, got ", nt);
      a.threads = static_cast<int>(nt);
    } else {
      QK_THROW(ValueError, "unknown option '", opt,
               "' (qk md reads -f -c -p -n -r -deffnm -g -e -o -trr -x -cpo -cpi -cpt -nsteps -nt -nb -pme -decomp -double; qk md -h explains them)");
    }
  }
  if (!deffnm.empty())
    for (const OutputOption& o : kOutputs)
      if (!given.count(o.opt)) a.*(o.file) = deffnm + o.extension;
  return a;
}

std::string mdrun_help(const std::string& program) {
  return program +
         ": molecular dynamics from GROMACS inputs (grompp + mdrun in one step; docs/md.md)\n"
         "\n"
         "  " + program + " -f run.mdp -c conf.gro -p topol.top [-deffnm NAME] [-nsteps N] [-nt THREADS] [-double]\n"
         "\n"
         "  -f FILE       run parameters (.mdp)                 [grompp.mdp]\n"
         "  -c FILE       start coordinates (.gro)              [conf.gro]\n"
         "  -p FILE       topology (.top; #include from the file's folder, then $GMXDATA/top or\n"
         "                /usr/share/gromacs/top)               [topol.top]\n"
         "  -n FILE       index file (.ndx, from gmx make_ndx): groups for tc-grps beside the\n"
         "                default ones (System, Protein, non-Protein, Water, SOL, Ion, ...)\n"
         "  -r FILE       the position restraints' reference structure (.gro)  [the -c file]\n"
         "  -deffnm NAME  write NAME.log, NAME.edr, NAME.gro, NAME.trr, NAME.xtc and NAME.cpt\n"
         "  -g FILE       the log (energy blocks every nstenergy steps, Performance) [md.log]\n"
         "  -e FILE       energies every nstenergy steps, for gmx energy [ener.edr]\n"
         "  -o FILE       final coordinates                     [confout.gro]\n"
         "  -trr FILE     trajectory: positions, velocities, forces every nstxout, nstvout,\n"
         "                nstfout steps (none when all are 0)   [traj.trr]\n"
         "  -x FILE       compressed trajectory: positions every nstxout-compressed steps\n"
         "                at compressed-x-precision (none when 0) [traj_comp.xtc]\n"
         "  -cpo DIR      checkpoint folder: the state every -cpt minutes and before the\n"
         "                last step, crash-safe, the newest two kept [state.cpt]\n"
         "  -cpi DIR      go on from the newest valid checkpoint in DIR (none there: start\n"
         "                afresh); the log and trajectories are cut back to it and appended\n"
         "  -cpt MIN      minutes between checkpoints (0: only before the last step; -1: none) [15]\n"
         "  -nsteps N     steps to run (-1: the mdp's nsteps)   [-1]\n"
         "  -nt N         threads (0: QK_NUM_THREADS or one per core) [0]\n"
         "  -nb cpu|gpu   where the short-range pair forces run: gpu puts them on a CUDA GPU\n"
         "                (single precision) while the CPU does PME, bonded forces, constraints\n"
         "                and the update, as gmx mdrun -nb gpu -pme cpu; not yet measured on a\n"
         "                GPU (docs/md.md) [cpu]\n"
         "  -pme cpu|gpu  where PME runs: gpu spreads, transforms (cuFFT), solves and gathers on\n"
         "                a CUDA GPU (single precision, one rank); not yet measured on a GPU [cpu]\n"
         "  -double       everything in double precision, as gmx_d (default: GROMACS's mixed\n"
         "                precision, short-range pair forces in float)\n"
         "\n"
         "Over several processes: qk run --nproc-per-node N -- " + program + " ... (or mpirun with\n"
         "MASTER_ADDR and MASTER_PORT set; -nt: threads per rank; the first rank writes the files):\n"
         "  -decomp auto|domains|forces  domains: each rank owns a slab across the box's longest\n"
         "                axis (or a cell of a grid across the two longest), its molecules and a halo\n"
         "                from its neighbours (MD on the CPU with a Verlet buffer; slabs or cells at\n"
         "                least the pair-list radius wide); forces: every rank holds all\n"
         "                atoms and computes a share of the forces, summed each step; auto: domains\n"
         "                where they can be, else forces (the log says which and why) [auto]\n";
}

RunResult mdrun(const MdrunArgs& args, std::ostream& out, const ForceShare& share) {
  if (args.threads > 0) set_num_threads(args.threads);
  const MdpOptions mdp = read_mdp(args.mdp);
  const Topology top = read_top(args.top, TopOptions{mdp.defines, {}});
  const GroFile conf = read_gro(args.conf);
  // The devices asked for, before anything is written.
  ForceCalculator::check_nonbonded_device(args.nonbonded, args.precision);
  ForceCalculator::check_pme_device(args.pme, args.precision);
  QK_CHECK(args.pme == MdDevice::kCpu || mdp.coulomb_type == CoulombType::kPme,
           "-pme gpu: ", args.mdp, " has no PME (coulombtype)");
  QK_CHECK(args.pme == MdDevice::kCpu || share.size == 1, "-pme gpu runs on one rank, not ", share.size,
           ": run PME on the CPU (-pme cpu) when the forces are shared over ranks");
  if (share.size > 1 && args.decomposition == RunOptions::Decomposition::kDomains) {
    RunOptions plan;
    plan.share = share;
    plan.decomposition = args.decomposition;
    const std::string why = why_not_domains(top, mdp, conf, plan);
    QK_CHECK(why.empty(), "-decomp domains over ", share.size, " ranks: ", why,
             " (-decomp forces shares the forces instead)");
  }
  // Resuming: the log goes back to its size at the checkpoint and is appended to, as the trajectories are.
  const std::optional<MdCheckpoint> resume = args.resume.empty() ? std::nullopt : latest_md_checkpoint(args.resume);
  // Ranks after the first write nothing: their log is a stream without a buffer.
  const bool writer = share.rank == 0;
  std::ostream nowhere(nullptr);
  std::ofstream log_file;
  std::ostream& log = writer ? static_cast<std::ostream&>(log_file) : nowhere;
  if (writer && resume && resume->log_bytes >= 0) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(args.log, ec);
    QK_CHECK(!ec && size >= static_cast<uintmax_t>(resume->log_bytes), "cannot resume the log ", args.log,
             ": the checkpoint expects ", resume->log_bytes, " bytes written before it (restore the file or start "
             "without -cpi)");
    std::filesystem::resize_file(args.log, static_cast<uintmax_t>(resume->log_bytes));
    log_file.open(args.log, std::ios::app);
  } else if (writer) {
    log_file.open(args.log);
  }
  QK_CHECK(!writer || log_file.good(), "cannot write the log ", args.log);
  if (!args.resume.empty())
    out << (resume ? "qk md: going on from " + resume->path + " at step " + std::to_string(resume->step) + "\n"
                   : "qk md: no checkpoint in " + args.resume + ": starting at step 0\n");

  // What the run is, as grompp and mdrun's log headers tell it.
  char buf[512];
  {
    ForceCalculator probe(top, mdp, conf.box, args.precision);
    const std::array<int, 3> grid = probe.pme_grid();
    std::snprintf(buf, sizeof buf,
                  "qk md: %s, %d atoms (%s), box %.5f x %.5f x %.5f nm\n"
                  "  inputs: -f %s -c %s -p %s\n"
                  "  integrator %s, %lld steps of %g ps, %d threads%s, %s precision\n"
                  "  cut-off %g nm; %s",
                  top.system_name.c_str(), top.num_atoms(), args.conf.c_str(), conf.box[0], conf.box[1],
                  conf.box[2], args.mdp.c_str(), args.conf.c_str(), args.top.c_str(),
                  mdp.integrator == Integrator::kMd ? "md (leap-frog)" : "steep",
                  static_cast<long long>(args.nsteps >= 0 ? args.nsteps : mdp.nsteps), mdp.dt, num_threads(),
                  share.size > 1 ? (" on each of " + std::to_string(share.size) + " ranks").c_str() : "",
                  args.precision == Precision::kDouble ? "double" : "mixed",
                  probe.cutoff(), mdp.coulomb_type == CoulombType::kPme ? "PME" : "reaction-field");
    std::string header = buf;
    if (grid[0] > 0) {
      std::snprintf(buf, sizeof buf, ", fourier grid %dx%dx%d, order %d, 1/beta %.6f nm", grid[0], grid[1], grid[2],
                    mdp.pme_order, 1 / probe.ewald_beta());
      header += buf;
    }
    header += "\n" + describe_pair_lists(pair_list_setup(top, mdp, conf), mdp);
    if (share.size > 1) {
      RunOptions plan;
      plan.share = share;
      plan.decomposition = args.decomposition;
      header += "  " + describe_decomposition(top, mdp, conf, plan) + "\n";
    }
    if (args.nonbonded != MdDevice::kCpu) {
      probe.set_nonbonded_device(args.nonbonded);
      header += "  short-range pair forces on " + probe.nonbonded_device_name() + " (-nb gpu, single precision)\n";
    }
    if (args.pme != MdDevice::kCpu) {
      probe.set_pme_device(args.pme);
      header += "  PME on " + probe.pme_device_name() + " (-pme gpu, single precision)\n";
    }
    if (mdp.disp_corr != DispCorr::kNo) {
      std::snprintf(buf, sizeof buf, "  Long Range LJ corr.: <C6> %10.4e\n", probe.average_c6());
      header += buf;
    }
    if (mdp.integrator == Integrator::kMd) {
      std::snprintf(buf, sizeof buf, "  degrees of freedom %.0f\n", degrees_of_freedom(top, mdp));
      header += buf;
      if (mdp.pcoupl == Barostat::kCRescale) {
        std::snprintf(buf, sizeof buf,
                      "  pressure coupling C-rescale, isotropic: ref-p %g bar, tau-p %g ps, compressibility %g "
                      "1/bar, every %d steps\n",
                      mdp.ref_p, mdp.tau_p, mdp.compressibility, mdp.nstpcouple > 0 ? mdp.nstpcouple : 10);
        header += buf;
      }
      if (mdp.tcoupl != Thermostat::kNo) {  // each T-coupling group, as grompp tells them
        const TcGroups tc = tc_groups(top, lincs_constraints(top, mdp), mdp, run_groups(top, args.index));
        for (size_t g = 0; g < tc.names.size(); ++g) {
          char coupling[96];
          if (tc.tau_t[g] > 0) {
            std::snprintf(coupling, sizeof coupling, "ref-t %g K, tau-t %g ps", tc.ref_t[g], tc.tau_t[g]);
          } else {
            std::snprintf(coupling, sizeof coupling, "not coupled (tau-t -1)");
          }
          std::snprintf(buf, sizeof buf, "  T-coupling group %s: %lld atoms, %.2f degrees of freedom, %s\n",
                        tc.names[g].c_str(),
                        static_cast<long long>(std::count(tc.group_of_atom.begin(), tc.group_of_atom.end(), int(g))),
                        tc.ndf[g], coupling);
          header += buf;
        }
      }
    }
    if (mdp.integrator == Integrator::kSteep &&
        (mdp.nstxout > 0 || mdp.nstvout > 0 || mdp.nstfout > 0 || mdp.nstxout_compressed > 0))
      header += "  mdp keys nstxout/nstvout/nstfout/nstxout-compressed not acted on: a minimization writes only the "
                "final structure\n";
    for (const std::string& key : mdp.keys_without_effect)
      for (const IgnoredMdpKey& k : mdp_keys_without_effect())
        if (key == k.key) header += "  mdp key " + key + " read, not acted on: " + k.why + "\n";
    if (!resume) log << header << "\n";  // a resumed log has it already
    out << header;
  }
  RunOptions opt;
  opt.nsteps = args.nsteps;
  opt.log = &log;
  opt.share = share;
  opt.precision = args.precision;
  opt.nonbonded = args.nonbonded;
  opt.pme = args.pme;
  opt.decomposition = args.decomposition;
  opt.index_file = args.index;
  std::optional<GroFile> reference;
  if (!args.restraint.empty()) {
    reference = read_gro(args.restraint);
    opt.restraint_reference = &*reference;
  }
  if (writer && mdp.integrator == Integrator::kMd && args.checkpoint_minutes >= 0) {
    opt.checkpoint_dir = args.checkpoint;
    opt.checkpoint_every_minutes = args.checkpoint_minutes;
  }
  if (resume) opt.resume_from = args.resume;
  if (writer && mdp.integrator == Integrator::kMd) opt.energy_file = args.energy_file;
  opt.progress = &out;  // "step N (x%), will finish at ..." every 10 s, as mdrun's terminal line
  const bool writes_trajectory =
      writer && mdp.integrator == Integrator::kMd && (mdp.nstxout > 0 || mdp.nstvout > 0 || mdp.nstfout > 0);
  if (writes_trajectory) opt.trajectory = args.trajectory;
  const bool writes_compressed = writer && mdp.integrator == Integrator::kMd && mdp.nstxout_compressed > 0;
  if (writes_compressed) opt.compressed_trajectory = args.compressed_trajectory;
  RunResult r = run(top, mdp, conf, opt);
  if (!writer) return r;
  GroFile final_conf = r.final_conf;
  final_conf.title = top.system_name;
  write_gro(args.confout, final_conf);
  if (mdp.integrator == Integrator::kMd) {
    write_performance(out, r.wall_seconds, num_threads() * share.size, r.ns_per_day, r.hours_per_ns);
  } else {
    std::snprintf(buf, sizeof buf, "Steepest Descents %s in %lld steps: Epot %.6e kJ/mol, Fmax %.4e on atom %d\n",
                  r.converged ? "converged" : "did not converge", static_cast<long long>(r.steps),
                  r.frames.back().potential.potential(), r.frames.back().fmax, r.frames.back().fmax_atom + 1);
    out << buf;
  }
  out << "wrote " << args.log << (opt.energy_file.empty() ? std::string() : ", " + opt.energy_file)
      << (writes_trajectory ? ", " + args.trajectory : std::string())
      << (writes_compressed ? ", " + args.compressed_trajectory : std::string())
      << (opt.checkpoint_dir.empty() ? std::string() : ", the checkpoint " + opt.checkpoint_dir) << " and "
      << args.confout << "\n";
  return r;
}

}  // namespace qk::md

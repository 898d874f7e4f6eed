// GROMACS .mdp run parameters: the subset `qk md` implements, typed.
//
//   qk::md::MdpOptions mdp = qk::md::read_mdp("run.mdp");
//   // mdp.integrator, mdp.dt, mdp.coulomb_type, mdp.rcoulomb, ...
//
// Lines are `key = value`; ';' starts a comment; in keys '-' and '_' are the
// same (GROMACS's rule) and case matters for neither keys nor the enum values
// we compare case-insensitively (GROMACS does the same). A key qk md does not
// implement is an error naming the file, line and key, never silently
// ignored; so is a value it does not implement (coulombtype = Cut-off, say).
// Keys that GROMACS accepts and that do not change qk md's results (output it
// does not write yet: nstxout, nstvout, ...; pair-list knobs its exact buffer
// makes moot: nstlist, verlet-buffer-tolerance) are accepted and listed in
// mdp_keys_without_effect(), and the log names each one a file sets, so a user
// can see what was not acted on. Defaults are GROMACS's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qk::md {

enum class Integrator { kMd, kSteep };
enum class CoulombType { kPme, kReactionField };
enum class DispCorr { kNo, kEnerPres, kEner };
enum class Thermostat { kNo, kVRescale };
enum class Barostat { kNo, kCRescale };
enum class RefCoordScaling { kNo, kCom };
enum class Constraints { kNone, kHBonds, kAllBonds };
enum class CommMode { kLinear, kNone };

struct MdpOptions {
  std::string source;  // the file it came from (for messages)
  Integrator integrator = Integrator::kMd;
  double tinit = 0;
  double dt = 0.001;        // ps
  long long nsteps = 0;
  // Energy minimization (steep).
  double emtol = 10.0;      // kJ mol^-1 nm^-1
  double emstep = 0.01;     // nm
  // Non-bonded interactions.
  CoulombType coulomb_type = CoulombType::kReactionField;
  double rcoulomb = 1.0;
  double epsilon_r = 1.0;
  double epsilon_rf = 0.0;  // 0: infinity (conducting boundary), GROMACS's default
  double rvdw = 1.0;
  // The pair list (verlet_buffer.h): its buffers from the drift tolerance (kJ/mol/ps per atom) for a list
  // kept nstlist steps (raised with a thermostat, as mdrun does); -1: exact lists instead.
  int nstlist = 10;
  double verlet_buffer_tolerance = 0.005;
  DispCorr disp_corr = DispCorr::kNo;
  // PME.
  double fourier_spacing = 0.12;
  int fourier_nx = 0, fourier_ny = 0, fourier_nz = 0;  // 0: from fourier_spacing
  int pme_order = 4;
  double ewald_rtol = 1e-5;
  // Temperature coupling: groups by name (GROMACS's default groups, or an index file's), and per group the
  // time constant (ps; -1: not coupled) and the reference temperature (K).
  Thermostat tcoupl = Thermostat::kNo;
  int nsttcouple = -1;      // -1: GROMACS's default (10)
  std::vector<std::string> tc_grps{"System"};
  std::vector<double> tau_t{0.1};
  std::vector<double> ref_t{0.0};
  // Pressure coupling (pcoupl = C-rescale, Bernetti and Bussi 2020, isotropic): every nstpcouple steps
  // the box and positions scale toward ref-p (bar) with time constant tau-p (ps) and the compressibility
  // (1/bar); its noise draws from ld-seed (-1: the clock).
  Barostat pcoupl = Barostat::kNo;
  int nstpcouple = -1;          // -1: GROMACS's default (10)
  double tau_p = 1.0;
  double compressibility = 0;   // must be given with pcoupl
  double ref_p = 0;             // must be given with pcoupl
  bool ref_p_given = false;
  long long ld_seed = -1;
  // Position restraints' reference under pressure coupling: fixed (no), or their centre of mass scaled with
  // the box (com).
  RefCoordScaling refcoord_scaling = RefCoordScaling::kNo;
  // Initial velocities.
  bool gen_vel = false;
  double gen_temp = 300.0;
  long long gen_seed = -1;  // -1: from the clock
  bool continuation = false;
  Constraints constraints = Constraints::kNone;
  CommMode comm_mode = CommMode::kLinear;
  int nstcomm = 100;
  // Output: md.log's energy blocks; the .trr's positions, velocities and forces; the .xtc (0: never).
  int nstenergy = 1000;
  // Energies are also computed every nstcalcenergy steps (0: only on nstenergy's), for the .edr's exact
  // averages (GROMACS's default 100).
  int nstcalcenergy = 100;
  int nstxout = 0, nstvout = 0, nstfout = 0;
  int nstxout_compressed = 0;            // the .xtc's positions (compressed-x-grps: System only)
  double compressed_x_precision = 1000;  // 1/nm
  // -DNAME[=VALUE] for the topology's preprocessor (GROMACS's `define`).
  std::vector<std::string> defines;
  // Keys of mdp_keys_without_effect() that the file sets (normalized: lower case, '-').
  std::vector<std::string> keys_without_effect;
};

// Parses .mdp text; `name` names it in error messages.
MdpOptions parse_mdp(std::string_view text, const std::string& name);
MdpOptions read_mdp(const std::string& path);

// The keys GROMACS accepts that qk md reads and deliberately does not act on
// (they choose output files or performance knobs that do not change the
// physics); each with why.
struct IgnoredMdpKey {
  const char* key;
  const char* why;
};
const std::vector<IgnoredMdpKey>& mdp_keys_without_effect();

}  // namespace qk::md

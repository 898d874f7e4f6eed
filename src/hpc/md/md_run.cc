// run(): leap-frog MD and steepest-descent minimization (include/qk/hpc/md/md.h).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "md_log.h"
#include "pbc.h"
#include "qk/base/error.h"
#include "qk/base/fault.h"
#include "qk/base/pool_spin.h"
#include "qk/base/thread_pool.h"
#include "qk/hpc/md/edr.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/trr.h"
#include "qk/hpc/md/xtc.h"
#include "c_rescale.h"
#include "domain_decomposition.h"
#include "index_groups.h"
#include "lincs.h"
#include "md_checkpoint.h"
#include "position_restraints.h"
#include "run_atoms.h"
#include "sub_topology.h"
#include "settle.h"
#include "tc_groups.h"
#include "verlet_buffer.h"
#include "vrescale.h"
#include "vsite.h"

namespace qk::md {
namespace {

void require_settled(bool ok, const std::string& where) {
  QK_CHECK(ok, "SETTLE could not constrain a water at ", where,
           ": it is too distorted (the simulation is unstable: check the time step and the start structure)");
}

// The kinetic energy tensor; given each atom's T-coupling group, also each group's kinetic energy (kJ/mol)
// in the same pass over v.
Mat3 kinetic_tensor(const std::vector<Vec3>& v, const std::vector<double>& mass,
                    const std::vector<int>* group_of_atom = nullptr, std::vector<double>* group_ke = nullptr) {
  Mat3 k{};
  if (group_ke) std::fill(group_ke->begin(), group_ke->end(), 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) k[a][b] += 0.5 * mass[i] * v[i][a] * v[i][b];
    if (group_ke)
      (*group_ke)[(*group_of_atom)[i]] += 0.5 * mass[i] * (v[i][0] * v[i][0] + v[i][1] * v[i][1] + v[i][2] * v[i][2]);
  }
  return k;
}
double trace(const Mat3& m) { return m[0][0] + m[1][1] + m[2][2]; }

// atoms: the run's (a domain's home atoms: the momentum and mass summed over the ranks).
void remove_com_velocity(std::vector<Vec3>* v, const std::vector<double>& mass, const RunAtoms* atoms = nullptr) {
  double pm[4] = {0, 0, 0, 0};  // momentum, mass
  for (size_t i = 0; i < v->size(); ++i) {
    for (int d = 0; d < 3; ++d) pm[d] += mass[i] * (*v)[i][d];
    pm[3] += mass[i];
  }
  if (atoms) atoms->sum(pm, 4);
  for (Vec3& vi : *v)
    for (int d = 0; d < 3; ++d) vi[d] -= pm[d] / pm[3];
}

// A seed every rank agrees on: `seed` where it is one (>= 0), else rank 0's draw.
int64_t agreed_seed(int64_t seed, const ForceShare& share) {
  if (seed >= 0) return seed;
  double drawn = share.rank == 0 ? static_cast<double>(std::random_device{}()) : 0.0;
  if (share.size > 1) share.allreduce_sum(&drawn, 1);  // a 32-bit draw is exact in a double
  return static_cast<int64_t>(drawn);
}

}  // namespace

// Why this run cannot be decomposed into domains over opt.share's ranks ("" when it can).
static std::string domains_refused(const Topology& top, const MdpOptions& mdp, const GroFile& conf,
                                   const RunOptions& opt, const PairListSetup& lists) {
  if (opt.decomposition == RunOptions::Decomposition::kForces) return "asked for";
  if (mdp.integrator != Integrator::kMd) return "a minimization";
  if (!opt.share.exchange) return "the ranks' share has no exchange between neighbours";
  if (lists.exact) return "the pair list is exact (verlet-buffer-tolerance = -1), not on fixed intervals";
  if (opt.nonbonded != MdDevice::kCpu || opt.pme != MdDevice::kCpu) return "the forces run on a GPU";
  std::vector<Vec3> x(conf.atoms.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = conf.atoms[i].x;
  return DomainDecomposition::why_not(top, x, conf.box, lists.rlist_outer, opt.share.size);
}

static std::string describe_decomposition(const Topology& top, const GroFile& conf, const RunOptions& opt,
                                          const PairListSetup& lists, const std::string& refused) {
  if (opt.share.size <= 1) return {};
  if (!refused.empty()) return "force decomposition (every rank holds every atom): " + refused;
  std::vector<Vec3> x(conf.atoms.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = conf.atoms[i].x;
  const DomainGrid g = DomainDecomposition::grid_for(top, x, conf.box, lists.rlist_outer, opt.share.size);
  const Vec3& box = conf.box;
  char line[256];
  if (g.cells[1] == 1) {
    std::snprintf(line, sizeof line, "domain decomposition: %d slabs along %c of %.3f nm, each with a halo from the next",
                  g.cells[0], "xyz"[g.axes[0]], box[g.axes[0]] / g.cells[0]);
  } else {
    std::snprintf(line, sizeof line,
                  "domain decomposition: a %d x %d grid across %c and %c, cells of %.3f x %.3f nm, each with a halo "
                  "from 4 neighbours",
                  g.cells[0], g.cells[1], "xyz"[g.axes[0]], "xyz"[g.axes[1]], box[g.axes[0]] / g.cells[0],
                  box[g.axes[1]] / g.cells[1]);
  }
  return line;
}

std::string why_not_domains(const Topology& top, const MdpOptions& mdp, const GroFile& conf, const RunOptions& opt) {
  if (opt.share.size <= 1) return "one rank";
  return domains_refused(top, mdp, conf, opt, pair_list_setup(top, mdp, conf));
}

std::string describe_decomposition(const Topology& top, const MdpOptions& mdp, const GroFile& conf,
                                   const RunOptions& opt) {
  if (opt.share.size <= 1) return {};
  return describe_decomposition(top, conf, opt, pair_list_setup(top, mdp, conf), why_not_domains(top, mdp, conf, opt));
}

namespace {

// Maxwell-Boltzmann velocities at temperature t, scaled to exactly t over 3 degrees of freedom per atom
// (GROMACS's low_mspeed: constraining them afterwards removes their share of the constrained directions).
void generate_velocities(std::vector<Vec3>* v, const std::vector<double>& mass, double t, int64_t seed,
                         bool remove_com) {
  std::mt19937_64 rng(seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}());
  std::normal_distribution<double> normal(0.0, 1.0);
  for (size_t i = 0; i < v->size(); ++i)
    for (int d = 0; d < 3; ++d) (*v)[i][d] = mass[i] > 0 ? normal(rng) * std::sqrt(units::kBoltz * t / mass[i]) : 0;
  if (remove_com) remove_com_velocity(v, mass);
  const double ndf = 3.0 * static_cast<double>(std::count_if(mass.begin(), mass.end(), [](double m) { return m > 0; }));
  const double now = 2 * trace(kinetic_tensor(*v, mass)) / (ndf * units::kBoltz);
  if (now > 0)
    for (Vec3& vi : *v)
      for (int d = 0; d < 3; ++d) vi[d] *= std::sqrt(t / now);
}

// The position restraints of the topology, to the reference structure's positions (grompp's -r, else the
// start's); none when the topology has none.
std::optional<PositionRestraints> position_restraints(const Topology& top, const MdpOptions& mdp, const GroFile& conf,
                                                      const RunOptions& opt) {
  if (top.posres.empty()) return std::nullopt;
  const GroFile& ref = opt.restraint_reference ? *opt.restraint_reference : conf;
  QK_CHECK(static_cast<int>(ref.atoms.size()) == top.num_atoms(), "the restraint reference has ", ref.atoms.size(),
           " atoms but the topology ", top.num_atoms(), " (-r must be the system's structure)");
  QK_CHECK(mdp.pcoupl == Barostat::kNo || mdp.refcoord_scaling != RefCoordScaling::kNo, mdp.source,
           ": position restraints to fixed references under pressure coupling give artifacts (grompp warns); "
           "set refcoord-scaling = com");
  std::vector<Vec3> x(ref.atoms.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = ref.atoms[i].x;
  return PositionRestraints(top, x, ref.box, mdp.refcoord_scaling);
}

// The temperature the pair list's buffer is sized for (grompp): the thermostats' highest reference; without one
// the start's, gen-temp or the .gro's velocities.
double buffer_temperature(const Topology& top, const MdpOptions& mdp, const GroFile& conf, double ndf) {
  if (mdp.tcoupl != Thermostat::kNo) return *std::max_element(mdp.ref_t.begin(), mdp.ref_t.end());  // the hottest
  if (mdp.gen_vel && !mdp.continuation) return mdp.gen_temp;
  if (!conf.has_velocities || ndf <= 0) return 0;
  std::vector<Vec3> v(conf.atoms.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = conf.atoms[i].v;
  return 2 * trace(kinetic_tensor(v, top.mass)) / (ndf * units::kBoltz);
}

GroFile conf_with(const GroFile& start, const std::vector<Vec3>& x, const std::vector<Vec3>* v) {
  GroFile out = start;
  out.precision = 3;
  out.has_velocities = v != nullptr;
  for (size_t i = 0; i < x.size(); ++i) {
    out.atoms[i].x = x[i];
    out.atoms[i].v = v ? (*v)[i] : Vec3{0, 0, 0};
  }
  return out;
}

RunResult run_leapfrog(const Topology& top, const MdpOptions& mdp, const GroFile& conf, const RunOptions& opt) {
  const int n = top.num_atoms();
  const int64_t nsteps = opt.nsteps >= 0 ? opt.nsteps : mdp.nsteps;
  const double dt = mdp.dt;
  RectBox box(conf.box);  // scaled by the pressure coupling
  const bool com_removal = mdp.comm_mode == CommMode::kLinear && mdp.nstcomm > 0;
  std::vector<Vec3> x(n), v(n), f, xnew(n), vnew(n);
  for (int i = 0; i < n; ++i) {
    x[i] = conf.atoms[i].x;
    v[i] = conf.has_velocities ? conf.atoms[i].v : Vec3{0, 0, 0};
  }
  // constraints = h-bonds (bonds to hydrogens) or all-bonds: those bonds become LINCS constraints and leave
  // the bonded forces (water under [ settles ] has no bonds and goes to SETTLE).
  const std::vector<BondConstraint> constrained_bonds = bond_constraints(top, mdp);
  const Topology force_top = constrained_bonds.empty() ? Topology{} : without_bonds(top, constrained_bonds);
  const std::vector<BondConstraint> constraints = lincs_constraints(top, mdp);  // and the [ constraints ]
  // The temperature-coupling groups: each atom's, each group's degrees of freedom (their sum is ndf).
  const TcGroups tc = tc_groups(top, constraints, mdp, run_groups(top, opt.index_file));
  const int ngroups = static_cast<int>(tc.names.size());
  const double ndf = tc.total_ndf();
  const PairListSetup lists = pair_list_setup(top, mdp, conf);
  ForceCalculator ff(constrained_bonds.empty() ? top : force_top, mdp, conf.box, opt.precision, lists);
  ff.set_share(opt.share);
  ff.set_nonbonded_device(opt.nonbonded);
  ff.set_pme_device(opt.pme);
  const std::optional<PositionRestraints> all_posres = position_restraints(top, mdp, conf, opt);
  std::optional<PositionRestraints> posres = all_posres;  // this rank's (with domains: its home atoms')
  RunResult result;
  // Several ranks: domains (each integrating its own atoms) where they can be, else the forces shared out.
  std::unique_ptr<DomainDecomposition> dd;
  if (opt.share.size > 1) {
    const std::string refused = domains_refused(top, mdp, conf, opt, lists);
    QK_CHECK(opt.decomposition != RunOptions::Decomposition::kDomains || refused.empty(),
             "domain decomposition over ", opt.share.size, " ranks: ", refused,
             " (use force decomposition, or fewer ranks)");
    if (refused.empty()) dd = std::make_unique<DomainDecomposition>(top, opt.share);
    result.decomposition = describe_decomposition(top, conf, opt, lists, refused);
  }
  // The atoms this rank integrates (all of them until the domains are made, below).
  RunAtoms atoms(top, constraints, tc.group_of_atom);
  // Both act on their own atoms; a step that either cannot solve stops the run.
  auto constrain = [&](const std::vector<Vec3>& ref, std::vector<Vec3>* xp, std::vector<Vec3>* vel, double invdt,
                       Mat3* r_m_dx, const std::string& where) {
    require_settled(atoms.settle().apply(box, ref, xp, vel, invdt, r_m_dx), where);
    QK_CHECK(atoms.lincs().apply(box, ref, xp, vel, invdt, r_m_dx), "LINCS could not constrain a bond at ", where,
             ": it rotated too far in one step (the simulation is unstable: check the time step and the start "
             "structure)");
  };
  // A resumed run takes x, v and the rest from the checkpoint: no generated velocities, no first constraining.
  const std::optional<MdCheckpoint> resumed =
      opt.resume_from.empty() ? std::nullopt : latest_md_checkpoint(opt.resume_from);
  if (resumed) {
    QK_CHECK(static_cast<int>(resumed->x.size()) == n, resumed->path, " holds ", resumed->x.size(),
             " atoms, the topology ", n, " (resume with the run's own inputs)");
    QK_CHECK(resumed->step <= nsteps, resumed->path, " is at step ", resumed->step, ", past the run's ", nsteps,
             " steps (raise -nsteps to go on)");
    if (mdp.pcoupl == Barostat::kNo)
      for (int d = 0; d < 3; ++d)
        QK_CHECK(std::abs(resumed->box[d] - box.length[d]) <= 1e-9 * box.length[d], resumed->path,
                 ": its box differs from the .gro's (resume with the run's own inputs)");
    box = RectBox(resumed->box);
    ff.set_box(resumed->box);
    x = resumed->x;
    v = resumed->v;
  } else if (mdp.gen_vel && !mdp.continuation) {
    generate_velocities(&v, top.mass, mdp.gen_temp, agreed_seed(mdp.gen_seed, opt.share), com_removal);
  }
  if (com_removal && !resumed) remove_com_velocity(&v, top.mass);
  if (!resumed && !mdp.continuation && (!atoms.settle().empty() || !atoms.lincs().empty())) {
    // GROMACS's do_constrain_first: x onto the constraints, then v(-dt/2) consistent with x(-dt).
    std::vector<Vec3> x0 = x;
    constrain(x0, &x, nullptr, 0, nullptr, "the start structure");
    std::vector<Vec3> back(n);
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) back[i][d] = x[i][d] - dt * v[i][d];
    std::vector<Vec3> back0 = back;
    constrain(x, &back, nullptr, 0, nullptr, "the start velocities");
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) v[i][d] -= (back[i][d] - back0[i][d]) / dt;
  }
  construct_virtual_sites(top, box, &x);  // from the (constrained) atoms, as mdrun before step 0
  const int nsttcouple = mdp.nsttcouple > 0 ? mdp.nsttcouple : 10;  // GROMACS's default
  // One V-rescale per coupled group (tau-t -1 leaves a group uncoupled), each with its own random stream.
  std::vector<std::unique_ptr<VRescale>> thermostats(ngroups);
  int coupled_groups = 0;
  if (mdp.tcoupl == Thermostat::kVRescale) {
    const int64_t seed = mdp.gen_seed >= 0 ? mdp.gen_seed + 1 : agreed_seed(-1, opt.share);
    for (int g = 0; g < ngroups; ++g)
      if (tc.tau_t[g] > 0) {
        thermostats[g] = std::make_unique<VRescale>(tc.ref_t[g], tc.tau_t[g], dt * nsttcouple, tc.ndf[g],
                                                    static_cast<uint64_t>(seed + g));
        ++coupled_groups;
      }
  }
  if (resumed) {
    QK_CHECK(static_cast<int>(resumed->thermostats.size()) == coupled_groups &&
                 static_cast<int>(resumed->half_step_group_kinetic.size()) == ngroups,
             resumed->path, ": the checkpoint was written with ", resumed->thermostats.size(),
             " coupled T-coupling group(s) of ", resumed->half_step_group_kinetic.size(), ", the mdp now has ",
             coupled_groups, " of ", ngroups, " (resume with the run's own mdp)");
    for (int g = 0, k = 0; g < ngroups; ++g)
      if (thermostats[g]) thermostats[g]->restore(resumed->thermostats[k++]);
  }
  auto thermostat_integral = [&] {
    double s = 0;
    for (const auto& t : thermostats)
      if (t) s += t->integral();
    return s;
  };

  // Trajectories: a resumed run cuts each back to its size at the checkpoint and appends.
  auto kept = [&](int64_t bytes) {
    return resumed && bytes >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(bytes)) : std::nullopt;
  };
  std::unique_ptr<TrrWriter> trajectory;
  if (!opt.trajectory.empty() && (mdp.nstxout > 0 || mdp.nstvout > 0 || mdp.nstfout > 0))
    trajectory = std::make_unique<TrrWriter>(opt.trajectory, opt.precision == Precision::kDouble,
                                             kept(resumed ? resumed->trr_bytes : -1));
  std::unique_ptr<XtcWriter> compressed;
  if (!opt.compressed_trajectory.empty() && mdp.nstxout_compressed > 0)
    compressed = std::make_unique<XtcWriter>(opt.compressed_trajectory, static_cast<float>(mdp.compressed_x_precision),
                                             kept(resumed ? resumed->xtc_bytes : -1));
  std::unique_ptr<EdrWriter> energy_file;  // opened at the first energy step, when its terms are known
  int64_t last_energy_step = -1;
  auto at = [](int nst, int64_t step) { return nst > 0 && step % nst == 0; };

  // Energies are computed every calc_every steps too, for the .edr's running sums and md.log's averages
  // (as grompp: at most nstenergy apart, and nstenergy a multiple of it).
  int calc_every = std::max(mdp.nstcalcenergy, 0);
  if (mdp.nstenergy > 0 && calc_every > mdp.nstenergy) calc_every = mdp.nstenergy;
  if (mdp.nstenergy > 0 && calc_every > 0) calc_every = std::gcd(calc_every, mdp.nstenergy);
  EdrSums sums = resumed ? resumed->energy_sums : EdrSums{};
  // C-rescale: every nstpcouple steps, from that step's pressure (its virial is computed then too).
  const bool barostat = mdp.pcoupl == Barostat::kCRescale;
  const int nstpcouple = mdp.nstpcouple > 0 ? mdp.nstpcouple : 10;  // GROMACS's default
  const uint64_t barostat_seed = static_cast<uint64_t>(barostat ? agreed_seed(mdp.ld_seed, opt.share) : 0);
  double baros_integral = resumed ? resumed->baros_integral : 0;  // the barostat's work, for the conserved energy
  std::vector<EdrTerm> edr_names;  // the terms summed, for md.log's averages
  // The kinetic energy at t - dt/2: the tensor and per T-coupling group.
  std::vector<double> group_half_step_old(ngroups), group_half_step_new(ngroups);
  Mat3 half_step_old = kinetic_tensor(v, top.mass, &tc.group_of_atom, &group_half_step_old);
  if (resumed) {
    half_step_old = resumed->half_step_kinetic;
    group_half_step_old = resumed->half_step_group_kinetic;
  }
  const int64_t first_step = resumed ? resumed->step : 0;
  // Domains: made now from every atom's start (the same on every rank), anew at every pair-list build. Where
  // they no longer fit (the box shrank, a molecule stretched) the run goes on with the forces shared out.
  auto partition = [&](const std::vector<Vec3>& all_x, const std::vector<Vec3>& all_v, int64_t step) {
    const std::string problem = dd->partition(all_x, box.length, lists.rlist_outer);
    if (!problem.empty()) {  // (at the start only after a checkpoint: the .gro's own box was checked above)
      QK_CHECK(opt.decomposition != RunOptions::Decomposition::kDomains, "domain decomposition over ",
               opt.share.size, " ranks at step ", step, ": ", problem);
      const std::string note = "step " + std::to_string(step) + ": the domains no longer fit (" + problem +
                               "); force decomposition from here on";
      if (opt.log) *opt.log << note << "\n\n";
      result.decomposition += "; " + note;
      ff.set_domains(nullptr);
      dd.reset();
      atoms.take_all();
      posres = all_posres;
      x = all_x;
      v = all_v;
      xnew.resize(x.size());
      vnew.resize(x.size());
      return;
    }
    atoms.take_home(dd.get());
    if (all_posres) posres = all_posres->select(local_indices(top.num_atoms(), dd->home()));
    x = dd->home_positions();
    v = atoms.mine(all_v);
    xnew.resize(x.size());
    vnew.resize(x.size());
  };
  if (dd) {
    partition(x, v, first_step);
    ff.set_domains(dd.get());
  }
  bool checkpoint_due = false;  // domains: a checkpoint waiting for the next pair-list step
  std::vector<double> rank_sums;  // domains: a step's values summed over the ranks
  std::vector<double> lambda(ngroups);  // this step's V-rescale factor per group
  const auto start = std::chrono::steady_clock::now();
  auto last_checkpoint = start, last_progress = start;
  // A fresh run replaces the checkpoints of an earlier run in its folder (as mdrun overwrites state.cpt):
  // left there, a later -cpi would go on from the other run's state.
  if (!opt.checkpoint_dir.empty() && !resumed) clear_md_checkpoints(opt.checkpoint_dir);
  // The time accounting: each lap() charges the time since the last one to a part of the step.
  auto mark = std::chrono::steady_clock::now();
  auto lap = [&mark](double* to) {
    const auto now = std::chrono::steady_clock::now();
    *to += std::chrono::duration<double>(now - mark).count();
    mark = now;
  };
  double ignored = 0;
  for (int64_t step = first_step; step <= nsteps; ++step) {
    lap(&ignored);  // com removal and the swaps: rest, computed at the end
    // A checkpoint holds the state at the start of a step: every checkpoint_every_steps steps or
    // checkpoint_every_minutes, and before the last step (whose outputs a resumed run writes again).
    // With domains every rank gathers the state for it, so they agree on when: at the next pair-list step.
    const bool list_step = step % lists.nstlist == 0;
    if (!opt.checkpoint_dir.empty() && step > first_step) {
      const double minutes =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count() / 60;
      checkpoint_due |= (opt.checkpoint_every_steps > 0 && step % opt.checkpoint_every_steps == 0) ||
                        (opt.checkpoint_every_minutes > 0 && minutes >= opt.checkpoint_every_minutes) ||
                        step == nsteps;
    }
    bool checkpoint_now = checkpoint_due;
    if (dd) {
      checkpoint_now = false;
      if (step > first_step && (list_step || step == nsteps)) {
        double due = checkpoint_due ? 1 : 0;
        atoms.sum(&due, 1);
        checkpoint_now = due > 0;
      }
    }
    if (checkpoint_now) {
      checkpoint_due = false;
      const std::vector<Vec3> all_x = atoms.everyone(x), all_v = atoms.everyone(v);
      if (!opt.checkpoint_dir.empty()) {
        MdCheckpoint c;
        c.step = step;
        c.time = mdp.tinit + step * dt;
        c.box = box.length;
        c.x = all_x;
        c.v = all_v;
        c.half_step_kinetic = half_step_old;
        c.half_step_group_kinetic = group_half_step_old;
        c.baros_integral = baros_integral;
        c.energy_sums = sums;
        for (const auto& t : thermostats)
          if (t) c.thermostats.push_back(t->save());
        c.trr_bytes = trajectory ? static_cast<int64_t>(trajectory->bytes()) : -1;
        c.xtc_bytes = compressed ? static_cast<int64_t>(compressed->bytes()) : -1;
        c.edr_bytes = energy_file ? static_cast<int64_t>(energy_file->bytes()) : -1;
        if (opt.log) {
          opt.log->flush();
          c.log_bytes = static_cast<int64_t>(opt.log->tellp());
        }
        save_md_checkpoint(opt.checkpoint_dir, c);
        last_checkpoint = std::chrono::steady_clock::now();
      }
    }
    lap(&result.output_seconds);
    if (dd && list_step && step > first_step) {  // new domains, as the pair list is built anew
      partition(atoms.everyone(x), atoms.everyone(v), step);
      lap(&result.decomposition_seconds);
    }
    fault::point("md_step", step);  // crash tests: QK_FAULT_KILL=md_step:0:STEP (qk/base/fault.h)
    if (opt.progress && step > first_step) {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_progress).count() >= opt.progress_seconds || step == nsteps) {
        last_progress = now;
        const double done = static_cast<double>(step - first_step), left = static_cast<double>(nsteps - step);
        const double seconds_left = std::chrono::duration<double>(now - start).count() / done * left;
        const std::time_t finish = std::time(nullptr) + static_cast<std::time_t>(seconds_left + 0.5);
        std::tm local{};
        localtime_r(&finish, &local);
        char line[128];
        std::snprintf(line, sizeof line, "step %lld (%.0f%%), will finish at %02d:%02d:%02d\n",
                      static_cast<long long>(step), 100.0 * step / std::max<int64_t>(nsteps, 1), local.tm_hour,
                      local.tm_min, local.tm_sec);
        *opt.progress << line << std::flush;
      }
    }
    const Vec3 box_of_x = box.length;  // x(t)'s box (the pressure coupling may scale it below)
    const bool energy_step = (mdp.nstenergy > 0 && step % mdp.nstenergy == 0) || step == nsteps;
    const bool sum_step = calc_every > 0 && step % calc_every == 0;  // into the .edr's and md.log's averages
    const bool pcouple_step = barostat && step % nstpcouple == 0;
    const bool calc_step = energy_step || sum_step || pcouple_step;
    lap(&result.output_seconds);  // checkpoints and progress
    PotentialTerms pot = ff.compute(x, &f, calc_step, step);  // forces only on steps that compute no energies
    if (posres) {
      Mat3 restraint_virial{};
      pot.posres = posres->apply(x, box, &f, &restraint_virial);
      if (dd && calc_step) {  // every rank's restraints (the other terms were summed by ff.compute)
        double sums[10] = {pot.posres};
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) sums[1 + 3 * a + b] = restraint_virial[a][b];
        atoms.sum(sums, 10);
        pot.posres = sums[0];
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) restraint_virial[a][b] = sums[1 + 3 * a + b];
      }
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) pot.virial[a][b] += restraint_virial[a][b];
    }
    spread_virtual_site_forces(atoms.top(), &f);
    lap(&ignored);                                        // ff.times() has the parts
    // Frames hold every atom: with domains every rank gathers on the steps the mdp writes them.
    if ((trajectory || dd) && (at(mdp.nstxout, step) || at(mdp.nstvout, step) || at(mdp.nstfout, step))) {
      TrrFrame fr;
      fr.step = step;
      fr.time = mdp.tinit + step * dt;
      for (int d = 0; d < 3; ++d) fr.box[d][d] = box.length[d];
      if (at(mdp.nstxout, step)) fr.x = atoms.everyone(x);
      if (at(mdp.nstvout, step)) fr.v = atoms.everyone(v);
      if (at(mdp.nstfout, step)) fr.f = atoms.everyone(f);
      if (trajectory) trajectory->write(fr);
    }
    if ((compressed || dd) && at(mdp.nstxout_compressed, step)) {
      XtcFrame fr;
      fr.step = step;
      fr.time = mdp.tinit + step * dt;
      for (int d = 0; d < 3; ++d) fr.box[d][d] = box.length[d];
      fr.x = atoms.everyone(x);
      if (compressed) compressed->write(fr);
    }
    lap(&result.output_seconds);
    // GROMACS couples on steps where (step + nsttcouple - 1) is a multiple of nsttcouple, from the last half-step KE.
    std::fill(lambda.begin(), lambda.end(), 1.0);
    if (coupled_groups > 0 && (nsttcouple == 1 || (step + nsttcouple - 1) % nsttcouple == 0))
      for (int g = 0; g < ngroups; ++g)
        if (thermostats[g]) lambda[g] = thermostats[g]->lambda(group_half_step_old[g]);
    const std::vector<int>& group_of_atom = atoms.group_of_atom();
    const std::vector<double>& inv_mass = atoms.inv_mass();
    const int64_t nmine = static_cast<int64_t>(x.size());
    qk::parallel_for(0, nmine, 16384, [&](int64_t lo, int64_t hi) {  // threads only where they pay
      for (int64_t i = lo; i < hi; ++i)
        for (int d = 0; d < 3; ++d) {
          vnew[i][d] = lambda[group_of_atom[i]] * v[i][d] + f[i][d] * inv_mass[i] * dt;
          xnew[i][d] = x[i][d] + vnew[i][d] * dt;
        }
    });
    lap(&result.update_seconds);
    Mat3 r_m_dx{};
    constrain(x, &xnew, &vnew, 1 / dt, &r_m_dx, "step " + std::to_string(step));
    if (!top.vsites3.empty()) {
      construct_virtual_sites(atoms.top(), box, &xnew);
      virtual_site_velocities(atoms.top(), box, x, xnew, dt, &vnew);
    }
    lap(&result.constraint_seconds);
    Mat3 half_step_new = kinetic_tensor(vnew, atoms.top().mass, &group_of_atom, &group_half_step_new);
    // LINCS's deviation (md.log's Constr. rmsd), before any pressure scaling.
    double constraint_deviation = calc_step ? atoms.lincs().squared_deviations(box, xnew) : 0;
    lap(&result.update_seconds);
    if (dd) {  // the kinetic energies, the constraint virial and deviation over every rank's atoms
      rank_sums.clear();
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) rank_sums.insert(rank_sums.end(), {half_step_new[a][b], r_m_dx[a][b]});
      rank_sums.insert(rank_sums.end(), group_half_step_new.begin(), group_half_step_new.end());
      rank_sums.push_back(constraint_deviation);
      atoms.sum(rank_sums.data(), static_cast<int64_t>(rank_sums.size()));
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          half_step_new[a][b] = rank_sums[2 * (3 * a + b)];
          r_m_dx[a][b] = rank_sums[2 * (3 * a + b) + 1];
        }
      std::copy(rank_sums.begin() + 18, rank_sums.begin() + 18 + ngroups, group_half_step_new.begin());
      constraint_deviation = rank_sums.back();
      lap(&result.decomposition_seconds);
    }
    if (calc_step) {
      EnergyFrame e;
      e.step = step;
      e.time = mdp.tinit + step * dt;
      e.potential = pot;
      Mat3 ekin{}, virial = pot.virial;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          ekin[a][b] = 0.5 * (half_step_old[a][b] + half_step_new[a][b]);
          virial[a][b] -= 0.5 / (dt * dt) * r_m_dx[a][b];  // the constraint virial, -1/2 sum r (x) m dx / dt^2
        }
      e.virial = virial;
      e.box_z = box.length[2];
      e.kinetic = trace(ekin);
      e.total = pot.potential() + e.kinetic;
      e.temperature = ndf > 0 ? 2 * e.kinetic / (ndf * units::kBoltz) : 0;
      for (int g = 0; g < ngroups; ++g) {
        const double ke = 0.5 * (group_half_step_old[g] + group_half_step_new[g]);
        e.group_temperature.push_back(tc.ndf[g] > 0 ? 2 * ke / (tc.ndf[g] * units::kBoltz) : 0);
      }
      e.group_lambda = lambda;
      e.group_names = tc.names;
      const double fac = 2 * units::kPresFac / box.volume();
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) e.pressure_tensor[a][b] = fac * (ekin[a][b] - virial[a][b]);
      e.pressure = trace(e.pressure_tensor) / 3;
      e.box = box.length;
      if (!constraints.empty())
        e.constr_rmsd = std::sqrt(constraint_deviation / static_cast<double>(constraints.size()));
      if (pcouple_step) {
        // C-rescale scales x(t + dt), v(t + dt/2) and the box from this step's pressure (the kinetic energy
        // of this half step was taken before, as mdrun's).
        const double kt = mdp.tcoupl != Thermostat::kNo ? mdp.ref_t[0] * units::kBoltz : 0.0;
        const double mu = c_rescale_factor(mdp, nstpcouple * dt, e.pressure, box.volume(), kt, barostat_seed, step);
        for (int d = 0; d < 3; ++d)  // the work on the system: the force and constraint virial, no dispersion
          baros_integral -= 2 * (mu - 1) * (virial[d][d] - pot.disp_corr_virial);
        for (int64_t i = 0; i < nmine; ++i)
          for (int d = 0; d < 3; ++d) {
            xnew[i][d] *= mu;
            vnew[i][d] /= mu;
          }
        box = RectBox(Vec3{box.length[0] * mu, box.length[1] * mu, box.length[2] * mu});
        ff.set_box(box.length);
        if (dd) dd->set_box(box.length);
      }
      e.conserved = e.total + thermostat_integral() + baros_integral;
      std::vector<EdrTerm> terms;
      EdrFrame fr;
      edr_terms(e, top, mdp, &terms, &fr.values);
      if (sum_step) sums.add(fr.values);
      if (edr_names.empty()) edr_names = terms;
      if (energy_step && opt.log) write_energy_block(*opt.log, e, top, mdp);
      if (energy_step) sums.take(&fr);
      if (energy_step && !opt.energy_file.empty()) {
        if (!energy_file)
          energy_file = std::make_unique<EdrWriter>(opt.energy_file, std::move(terms), opt.precision == Precision::kDouble,
                                                    kept(resumed ? resumed->edr_bytes : -1));
        fr.step = step;
        fr.time = e.time;
        fr.dt = dt;
        fr.nsteps = last_energy_step < 0 ? 1 : step - last_energy_step;
        energy_file->write(fr);
        last_energy_step = step;
      }
      if (energy_step) result.frames.push_back(e);
    }
    lap(&result.output_seconds);
    if (step == nsteps) {
      const std::vector<Vec3> all_v = atoms.everyone(v);
      result.final_conf = conf_with(conf, atoms.everyone(x), &all_v);  // as mdrun's confout: x(t), v(t - dt/2)
      result.final_conf.box = box_of_x;
      break;
    }
    if (com_removal && step % mdp.nstcomm == 0) remove_com_velocity(&vnew, atoms.top().mass, &atoms);
    std::swap(x, xnew);
    std::swap(v, vnew);
    half_step_old = half_step_new;
    std::swap(group_half_step_old, group_half_step_new);
  }
  lap(&ignored);
  result.steps = nsteps;
  result.first_step = first_step;
  result.pair_list_builds = ff.pair_list_builds();
  result.pair_list_prunes = ff.pair_list_prunes();
  result.force_times = ff.times();
  result.pairs_in_list = ff.num_pairs();
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {  // what no lap charged: before the loop, and the force parts' own clock reads
    const ForceTimes& ft = result.force_times;
    result.rest_seconds = std::max(0.0, result.wall_seconds - (ft.list_build + ft.list_prune + ft.nonbonded + ft.pme +
                                                                ft.other + result.update_seconds +
                                                                result.constraint_seconds + result.output_seconds +
                                                                result.decomposition_seconds + ft.communication));
  }
  const double ns = static_cast<double>(nsteps - first_step) * dt / 1000.0;
  if (result.wall_seconds > 0 && ns > 0) {
    result.ns_per_day = ns / (result.wall_seconds / 86400.0);
    result.hours_per_ns = result.wall_seconds / 3600.0 / ns;
  }
  if (opt.log) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "Pair list: %lld builds in %lld steps (buffer %.3f nm), %lld prunes (buffer %.3f nm), %lld "
                  "pairs in the last\n\n",
                  static_cast<long long>(result.pair_list_builds), static_cast<long long>(nsteps),
                  ff.rlist() - ff.cutoff(), static_cast<long long>(ff.pair_list_prunes()),
                  ff.rlist_inner() - ff.cutoff(), static_cast<long long>(result.pairs_in_list));
    *opt.log << buf;
    if (sums.nsum_run > 0) write_averages(*opt.log, edr_names, sums, nsteps + 1, top, mdp);
    write_time_accounting(*opt.log, result, num_threads());
    write_performance(*opt.log, result.wall_seconds, num_threads() * opt.share.size, result.ns_per_day,
                      result.hours_per_ns);
  }
  return result;
}

// The largest force and its atom.
std::pair<double, int> max_force(const std::vector<Vec3>& f) {
  double best = -1;
  int atom = -1;
  for (size_t i = 0; i < f.size(); ++i) {
    const double m = dot(f[i], f[i]);
    if (m > best) {
      best = m;
      atom = static_cast<int>(i);
    }
  }
  return {std::sqrt(std::max(best, 0.0)), atom};
}

RunResult run_steep(const Topology& top, const MdpOptions& mdp, const GroFile& conf, const RunOptions& opt) {
  const int n = top.num_atoms();
  const int64_t nsteps = opt.nsteps >= 0 ? opt.nsteps : mdp.nsteps;
  const RectBox box(conf.box);
  std::vector<Vec3> x(n), f, xnew(n), fnew;
  for (int i = 0; i < n; ++i) x[i] = conf.atoms[i].x;
  ForceCalculator ff(top, mdp, conf.box, opt.precision);
  ff.set_share(opt.share);
  ff.set_nonbonded_device(opt.nonbonded);
  ff.set_pme_device(opt.pme);
  SettleConstraints settle(top, /*unit_masses=*/true);  // GROMACS minimizes with all masses 1
  if (!settle.empty()) {
    std::vector<Vec3> x0 = x;
    require_settled(settle.apply(box, x0, &x, nullptr, 0, nullptr), "the start structure");
  }
  RunResult result;
  const auto start = std::chrono::steady_clock::now();
  // Forces without their components along the constraints, as GROMACS minimizes (and measures Fmax).
  const std::optional<PositionRestraints> posres = position_restraints(top, mdp, conf, opt);
  auto forces = [&](const std::vector<Vec3>& at, std::vector<Vec3>* out) {
    PotentialTerms e = ff.compute(at, out);
    if (posres) e.posres = posres->apply(at, box, out, &e.virial);
    spread_virtual_site_forces(top, out);
    if (!settle.empty()) settle.project(box, at, out);
    return e;
  };
  construct_virtual_sites(top, box, &x);
  PotentialTerms pot = forces(x, &f);
  auto [fmax, fmax_atom] = max_force(f);
  auto record = [&](int64_t step) {
    EnergyFrame e;
    e.step = step;
    e.time = static_cast<double>(step);
    e.potential = pot;
    e.total = pot.potential();
    e.fmax = fmax;
    e.fmax_atom = fmax_atom;
    if (opt.log) write_energy_block(*opt.log, e, top, mdp);
    result.frames.push_back(e);
  };
  record(0);
  double ustep = mdp.emstep;
  int64_t count = 0;
  while (fmax >= mdp.emtol && count < nsteps) {
    ++count;
    const double scale = ustep / fmax;
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) xnew[i][d] = x[i][d] + scale * f[i][d];
    // A step that distorts a water past what SETTLE can solve counts as uphill (GROMACS: invalid step).
    const bool valid = settle.empty() || settle.apply(box, x, &xnew, nullptr, 0, nullptr);
    construct_virtual_sites(top, box, &xnew);
    PotentialTerms trial;
    if (valid) trial = forces(xnew, &fnew);
    if (valid && trial.potential() < pot.potential()) {  // accept and take a longer step next
      std::swap(x, xnew);
      std::swap(f, fnew);
      pot = trial;
      std::tie(fmax, fmax_atom) = max_force(f);
      ustep *= 1.2;
      record(count);
    } else {
      ustep *= 0.5;
    }
  }
  result.converged = fmax < mdp.emtol;
  result.steps = count;
  result.final_conf = conf_with(conf, x, nullptr);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (opt.log) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "\nSteepest Descents %s to Fmax < %g in %lld steps\nPotential Energy  = %21.14e\n"
                  "Maximum force     = %21.14e on atom %d\n",
                  result.converged ? "converged" : "did not converge", mdp.emtol, static_cast<long long>(count),
                  pot.potential(), fmax, fmax_atom + 1);
    *opt.log << buf;
  }
  return result;
}

}  // namespace

PairListSetup pair_list_setup(const Topology& top, const MdpOptions& mdp, const GroFile& conf) {
  return gromacs_pair_list_setup(top, lincs_constraints(top, mdp), mdp, conf.box,
                                 buffer_temperature(top, mdp, conf, degrees_of_freedom(top, mdp)));
}

std::string describe_pair_lists(const PairListSetup& lists, const MdpOptions& mdp) {
  const double rc = std::max(mdp.rvdw, mdp.rcoulomb);
  char buf[512];
  if (lists.exact) {
    std::snprintf(buf, sizeof buf, "  pair list: %s\n", lists.note.c_str());
  } else if (lists.nstlist_prune > 0) {
    std::snprintf(buf, sizeof buf,
                  "  pair list (%s), nstlist %d -> %d:\n"
                  "    outer list: updated every %d steps, buffer %.3f nm, rlist %.3f nm\n"
                  "    inner list: updated every %d steps, buffer %.3f nm, rlist %.3f nm\n",
                  lists.note.c_str(), mdp.nstlist, lists.nstlist, lists.nstlist, lists.rlist_outer - rc,
                  lists.rlist_outer, lists.nstlist_prune, lists.rlist_inner - rc, lists.rlist_inner);
  } else {
    std::snprintf(buf, sizeof buf,
                  "  pair list (%s), nstlist %d -> %d: updated every %d steps, buffer %.3f nm, rlist %.3f nm\n",
                  lists.note.c_str(), mdp.nstlist, lists.nstlist, lists.nstlist, lists.rlist_outer - rc,
                  lists.rlist_outer);
  }
  return buf;
}

double degrees_of_freedom(const Topology& top, const MdpOptions& mdp) {
  // grompp's count (tc_groups.h) with the whole system as one group.
  MdpOptions whole = mdp;
  whole.tcoupl = Thermostat::kNo;
  whole.tc_grps = {"System"};
  std::vector<int> all(top.num_atoms());
  std::iota(all.begin(), all.end(), 0);
  return tc_groups(top, lincs_constraints(top, mdp), whole, {AtomGroup{"System", std::move(all)}}).total_ndf();
}

RunResult run(const Topology& top, const MdpOptions& mdp, const GroFile& conf, const RunOptions& options) {
  QK_CHECK(static_cast<int>(conf.atoms.size()) == top.num_atoms(), "the coordinates have ",
           conf.atoms.size(), " atoms but the topology has ", top.num_atoms(),
           " (check [ molecules ] against the .gro)");
  // A step is ~10 short parallel loops on qk's pool and nothing else's threads: spinning between them
  // saves a 10-30 us wake-up each (qk/base/pool_spin.h).
  const ScopedPoolSpin spin(100);
  if (mdp.integrator == Integrator::kSteep) {
    QK_CHECK(lincs_constraints(top, mdp).empty(), mdp.source,
             ": steepest descent with bond constraints (LINCS) is not written yet; minimize with constraints = none "
             "(rigid water through [ settles ] works)");
    return run_steep(top, mdp, conf, options);
  }
  return run_leapfrog(top, mdp, conf, options);
}

}  // namespace qk::md

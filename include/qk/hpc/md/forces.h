// Forces and potential energy terms of a system, as GROMACS defines them.
//
//   qk::md::ForceCalculator ff(top, mdp, conf.box);
//   std::vector<qk::md::Vec3> f;
//   qk::md::PotentialTerms e = ff.compute(x, &f);   // e.lj_sr, e.coulomb_sr, e.coul_recip, ...
//
// Terms carry GROMACS's names: LJ (SR) and Coulomb (SR) from the
// Verlet pair list (potential-shift modifiers; for Coulomb also the excluded
// pairs' and self corrections, as GROMACS's kernels do), Coul. recip. from
// smooth PME, Disper. corr. and Pres. DC from the dispersion correction, Bond,
// Angle, Proper Dih., Ryckaert-Bell., Improper Dih., Per. Imp. Dih., LJ-14 and
// Coulomb-14 from the topology. The virial is GROMACS's
// -1/2 sum r (x) F, dispersion correction included, constraints not.
// Threads: qk's pool (QK_NUM_THREADS or qk::set_num_threads).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

struct PotentialTerms {
  double lj_sr = 0, disp_corr = 0, coulomb_sr = 0, coul_recip = 0;
  double bond = 0, angle = 0, lj14 = 0, coulomb14 = 0;
  double proper_dih = 0, rb_dih = 0, improper_dih = 0, periodic_improper_dih = 0;
  double posres = 0;   // "Position Rest." (added by md::run, not ForceCalculator)
  double pres_dc = 0;  // bar
  Mat3 virial{};       // kJ/mol
  double disp_corr_virial = 0;  // the dispersion correction's share of virial's diagonal (kJ/mol)
  double potential() const {
    return lj_sr + disp_corr + coulomb_sr + coul_recip + bond + angle + proper_dih + rb_dih + improper_dih +
           periodic_improper_dih + lj14 + coulomb14 + posres;
  }
};

// Wall seconds spent in each part of compute(), summed over its calls (mdrun's time accounting).
struct ForceTimes {
  double list_build = 0;  // the Verlet list built from scratch
  double list_prune = 0;  // the built list cut to the inner buffer (dynamic pruning)
  double nonbonded = 0;   // the pair kernel, the excluded pairs' and self corrections
  double pme = 0;         // reciprocal space
  double other = 0;       // bonded terms, dispersion correction, zeroing and sums
  double communication = 0;  // domains (set_domains): the halo's positions and forces, the energy terms' sums
};

// kDouble: everything in double (the fixture tests' default). kMixed: GROMACS's mixed precision, the
// short-range pair forces in float (nonbonded.h), sums, PME and the rest in double.
enum class Precision { kDouble, kMixed };

// How the pair list is kept through a run (GROMACS's Verlet buffer scheme; md::run sets it from the mdp,
// src/hpc/md/verlet_buffer.h).
struct PairListSetup {
  // exact: rebuilt (and pruned) whenever two atoms may have closed the buffer, so no pair is ever missed
  // (verlet-buffer-tolerance = -1, energy minimization). Otherwise GROMACS's fixed intervals below, their
  // buffers sized so the pairs that may enter the cut-off unseen stay within the drift tolerance.
  bool exact = true;
  int nstlist = 10;        // steps between builds
  double rlist_outer = 0;  // nm, the built list
  int nstlist_prune = 0;   // steps between prunes to rlist_inner; 0: none
  double rlist_inner = 0;  // nm
  double temperature = 0;  // K, the estimate's
  std::string note;        // how it was chosen, for md.log
};

// Several processes computing one system's forces together (`qk run
// --nproc-per-node N -- qk md`): every rank holds all the atoms; each
// computes its share of the pair list's cluster pairs, of the excluded
// pairs' corrections and of PME's spreading and gathering (the charge grid
// summed over the ranks, the FFTs on each), the first rank also the bonded
// terms and the dispersion correction; allreduce_sum (in place, over all
// the ranks, each given the same count) then sums the forces and terms, and
// broadcast_first (in place, rank 0's values to every rank) makes them the
// same bits everywhere (an all-reduce may add in a rank-dependent order),
// so that every rank integrates alike and decides pair-list rebuilds alike;
// without it allreduce_sum itself must give every rank the same bits. Force
// decomposition over replicated data: one all-reduce of 3N values a step,
// not GROMACS's domain decomposition.
//
// With `exchange` too, md::run can decompose the system into domains instead (domain_decomposition.h:
// each rank holds and integrates its own atoms and a halo from its neighbour; see set_domains below).
struct ForceShare {
  int rank = 0, size = 1;
  std::function<void(double* data, int64_t count)> allreduce_sum = {};
  std::function<void(double* data, int64_t count)> broadcast_first = {};
  // Sends send_count values to rank `to` while receiving recv_count values from rank `from` (each rank
  // calls it at once; to and from may be the same rank).
  std::function<void(int to, const double* send, int64_t send_count, int from, double* recv, int64_t recv_count)>
      exchange = {};
};

class DomainDecomposition;

// Where the pair list's interactions are computed (mdrun's -nb): the CPU kernel; the GPU (CUDA: the
// pair list goes to the device when it changes, positions up and forces back each step, as GROMACS's
// -nb gpu; DeviceError where this build or machine has none); or the GPU kernel emulated on the host
// (its arithmetic and data layout without a GPU: tests).
enum class MdDevice { kCpu, kGpu, kGpuEmulated };

class ForceCalculator {
 public:
  ForceCalculator(const Topology& top, const MdpOptions& mdp, const Vec3& box,
                  Precision precision = Precision::kDouble, const PairListSetup& lists = {});
  ~ForceCalculator();
  ForceCalculator(const ForceCalculator&) = delete;
  ForceCalculator& operator=(const ForceCalculator&) = delete;

  // Forces on every atom at positions x (f is resized and overwritten) and the energy terms. With
  // energies = false (MD steps that report nothing) the pair kernel computes forces only, and its
  // energies and virial are left out of the terms, which are then incomplete.
  // The pair list: exact lists are rebuilt when two atoms may have come closer by the buffer since the last
  // build; fixed intervals build at the first call and at steps that are multiples of nstlist, and prune
  // every nstlist_prune steps between (`step`: the MD step; -1 counts calls instead).
  PotentialTerms compute(const std::vector<Vec3>& x, std::vector<Vec3>* f, bool energies = true,
                         int64_t step = -1);

  // A new box (pressure coupling scales it every nstpcouple steps): PME's influence function, the pair
  // list's shifts and the dispersion correction's volume follow. The list radius must stay below half of it.
  void set_box(const Vec3& box);
  double cutoff() const;
  double rlist() const;                 // cut-off + buffer
  std::array<int, 3> pme_grid() const;  // zeros without PME
  double ewald_beta() const;            // 0 without PME
  double average_c6() const;            // of the dispersion correction (GROMACS's "<C6>")
  int64_t pair_list_builds() const;
  int64_t pair_list_prunes() const;     // GROMACS's dynamic pruning: the list cut to rlist_inner()
  double rlist_inner() const;
  int64_t num_pairs() const;            // atom pairs the kernel visits: cluster pairs x 16
  const ForceTimes& times() const;
  // Computes only this rank's share from now on (ForceShare; size 1: everything).
  void set_share(const ForceShare& share);
  // Computes this rank's domain from now on (domain_decomposition.h; null: every atom, or the ForceShare's
  // share): compute() then takes and returns its home atoms only, in dd's home() order; the list is built
  // whenever dd partitions anew (the caller partitions on the list's schedule) and pruned on it between; the
  // energy terms are summed over the ranks on steps that compute energies. Needs fixed-interval lists
  // (PairListSetup::exact false), the CPU kernels and this calculator's topology to be dd's.
  void set_domains(DomainDecomposition* dd);
  // The pair list's interactions on `device` from now on (kCpu at first). The GPU kernels are single
  // precision, so kGpu and kGpuEmulated need Precision::kMixed (ValueError otherwise).
  void set_nonbonded_device(MdDevice device);
  // The errors set_nonbonded_device would raise, without making anything (mdrun checks before it writes).
  static void check_nonbonded_device(MdDevice device, Precision precision);
  std::string nonbonded_device_name() const;  // "cpu", or the GPU's name
  // PME (spreading, FFTs, solve, gathering) on `device` from now on (kCpu at first), as gmx mdrun -pme gpu:
  // single precision, one rank (ValueError with a ForceShare over several), needs PME in the mdp.
  void set_pme_device(MdDevice device);
  static void check_pme_device(MdDevice device, Precision precision);
  std::string pme_device_name() const;  // "cpu", the GPU's name, or "none" without PME

 private:
  void sum_over_ranks(PotentialTerms* e, std::vector<Vec3>* f);  // f null: the terms only
  PotentialTerms compute_domain(const std::vector<Vec3>& x, std::vector<Vec3>* f, bool energies, int64_t step);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qk::md

// ForceCalculator: the sum of the interaction kinds, each in its own file.
#include "qk/hpc/md/forces.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bonded.h"
#include "dispersion_correction.h"
#include "nonbonded.h"
#include "pair_list.h"
#include "pme.h"
#include "qk/base/error.h"

namespace qk::md {

// The exact lists' buffers (nm) beyond the cut-off (PairListSetup::exact; GROMACS's schedule takes its
// own, verlet_buffer.h); see pair_list.h for why they are exact. The list is built with the outer one and
// pruned to the inner one, which the kernel runs over (GROMACS's dynamic pruning); boxes under
// 2 (rc + outer) get what fits below half the box. On 2 fs SPC water (3 nm box):
// a build every ~33 steps and a prune every ~2; outer 0.2-0.4 and inner 0.03-0.1 nm all ran within 5%
// (a prune is a bounding-box test per cluster pair, much cheaper than the kernel's 16 pairs).
constexpr double kOuterBuffer = 0.4;
constexpr double kInnerBuffer = 0.04;

struct ForceCalculator::Impl {
  const Topology& top;
  RectBox box;
  NonbondedParams nb;
  PairList list;
  std::unique_ptr<NonbondedKernel> kernel;
  std::vector<Vec3> x_at_build, x_at_prune;
  int64_t builds = 0, prunes = 0;
  std::unique_ptr<Pme> pme;
  DispersionCorrection disp;
  double epsilon_r;
  double buffer, inner;
  PairListSetup lists;
  int64_t calls = 0;
  std::vector<int> exclusion_chunks;  // fixed (not per thread count): the sums do not depend on threads
  ForceTimes times;

  Impl(const Topology& t, const MdpOptions& mdp, const Vec3& b, Precision precision, const PairListSetup& l)
      : top(t), box(b), disp(t, mdp.disp_corr, mdp.rvdw), epsilon_r(mdp.epsilon_r), lists(l) {
    nb.rc = mdp.rcoulomb;
    nb.ewald = mdp.coulomb_type == CoulombType::kPme;
    nb.epsilon_r = mdp.epsilon_r;
    nb.epsilon_rf = mdp.epsilon_rf;
    if (nb.ewald) {
      nb.beta = ewald_coefficient(mdp.rcoulomb, mdp.ewald_rtol);
      std::array<int, 3> n = pme_grid_size(b, mdp.fourier_spacing, mdp.pme_order);
      if (mdp.fourier_nx > 0) n[0] = mdp.fourier_nx;
      if (mdp.fourier_ny > 0) n[1] = mdp.fourier_ny;
      if (mdp.fourier_nz > 0) n[2] = mdp.fourier_nz;
      pme = std::make_unique<Pme>(b, n, mdp.pme_order, nb.beta, mdp.epsilon_r);
    }
    nb.finish();
    kernel = std::make_unique<NonbondedKernel>(t, nb, precision == Precision::kMixed);
    exclusion_chunks = md::exclusion_chunks(t, 16);
    const double half_box = 0.5 * std::min({b[0], b[1], b[2]});
    buffer = std::min(kOuterBuffer, 0.999 * (half_box - nb.rc));
    inner = std::min(kInnerBuffer, buffer);
    QK_CHECK(buffer > 0, mdp.source, ": the cut-off ", nb.rc, " nm is not below half the box (", half_box,
             " nm); use a larger box or a shorter cut-off");
    if (!lists.exact) {
      QK_CHECK(lists.nstlist >= 1 && lists.rlist_inner >= nb.rc && lists.rlist_outer >= lists.rlist_inner &&
                   lists.rlist_outer < half_box && lists.nstlist_prune >= 0,
               "ForceCalculator: an inconsistent pair-list setup (nstlist ", lists.nstlist, ", rlist ",
               lists.rlist_outer, " and ", lists.rlist_inner, " nm, prune every ", lists.nstlist_prune,
               " steps) for a cut-off of ", nb.rc, " nm in a box of half-side ", half_box, " nm");
      buffer = lists.rlist_outer - nb.rc;
      inner = lists.nstlist_prune > 0 ? lists.rlist_inner - nb.rc : buffer;
    }
  }

  // A pair can have come closer by at most the sum of the two largest displacements since x0.
  static bool moved(const std::vector<Vec3>& x, const std::vector<Vec3>& x0, double buf) {
    if (x0.size() != x.size()) return true;
    double first = 0, second = 0;  // squared
    for (size_t i = 0; i < x.size(); ++i) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c) d2 += (x[i][c] - x0[i][c]) * (x[i][c] - x0[i][c]);
      if (d2 > second) {
        second = std::min(d2, first);
        first = std::max(d2, first);
      }
    }
    return std::sqrt(first) + std::sqrt(second) >= buf;
  }

  // GROMACS's schedule: a build at the first call and every nstlist steps, a prune every nstlist_prune.
  void update_list_on_schedule(const std::vector<Vec3>& x, int64_t step) {
    auto t = Clock::now();
    const int64_t since = step % lists.nstlist;
    if (builds == 0 || since == 0) {
      list.build(x, box, nb.rc + buffer, top.exclusions);
      ++builds;
      times.list_build += lap(&t);
    } else if (lists.nstlist_prune == 0 || since % lists.nstlist_prune != 0) {
      return;
    }
    if (inner < buffer) {
      list.prune(x, nb.rc + inner);
      ++prunes;
    }
    times.list_prune += lap(&t);
  }

  // Builds the list when the outer buffer is used up, prunes it when the inner one is.
  void update_list(const std::vector<Vec3>& x) {
    auto t = Clock::now();
    if (builds == 0 || moved(x, x_at_build, buffer)) {
      list.build(x, box, nb.rc + buffer, top.exclusions);
      x_at_build = x;
      ++builds;
      times.list_build += lap(&t);
    } else if (!moved(x, x_at_prune, inner)) {
      times.list_prune += lap(&t);  // the displacement check
      return;
    }
    if (inner < buffer) list.prune(x, nb.rc + inner);
    x_at_prune = x;
    ++prunes;
    times.list_prune += lap(&t);
  }

  using Clock = std::chrono::steady_clock;
  // Seconds since *t; *t moves to now.
  static double lap(Clock::time_point* t) {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - *t).count();
    *t = now;
    return s;
  }
};

ForceCalculator::ForceCalculator(const Topology& top, const MdpOptions& mdp, const Vec3& box, Precision precision,
                                 const PairListSetup& lists)
    : impl_(std::make_unique<Impl>(top, mdp, box, precision, lists)) {}
ForceCalculator::~ForceCalculator() = default;

PotentialTerms ForceCalculator::compute(const std::vector<Vec3>& x, std::vector<Vec3>* f, bool energies,
                                        int64_t step) {
  Impl& m = *impl_;
  QK_CHECK(static_cast<int>(x.size()) == m.top.num_atoms(), "ForceCalculator: ", x.size(),
           " positions for a topology of ", m.top.num_atoms(), " atoms");
  if (m.lists.exact) {
    m.update_list(x);
  } else {
    m.update_list_on_schedule(x, step >= 0 ? step : m.calls);
  }
  ++m.calls;
  auto t = Impl::Clock::now();
  f->assign(x.size(), Vec3{0, 0, 0});
  PotentialTerms e;
  auto add = [](Mat3* to, const Mat3& v) {
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) (*to)[a][b] += v[a][b];
  };
  m.times.other += Impl::lap(&t);
  NonbondedEnergies pairs = m.kernel->compute(m.list, x, energies, f);
  NonbondedEnergies excl = coulomb_exclusions_and_self(x, m.box, m.top, m.nb, f, m.exclusion_chunks);
  m.times.nonbonded += Impl::lap(&t);
  e.lj_sr = pairs.lj;
  e.coulomb_sr = pairs.coulomb + excl.coulomb;
  add(&e.virial, pairs.virial);
  add(&e.virial, excl.virial);
  if (m.pme) e.coul_recip = m.pme->compute(x, m.top.charge, f, energies ? &e.virial : nullptr);
  m.times.pme += Impl::lap(&t);
  BondedEnergies b = bonded_forces(x, m.box, m.top, m.epsilon_r, f);
  e.bond = b.bond;
  e.angle = b.angle;
  e.proper_dih = b.proper_dih;
  e.rb_dih = b.rb_dih;
  e.improper_dih = b.improper_dih;
  e.periodic_improper_dih = b.periodic_improper_dih;
  e.lj14 = b.lj14;
  e.coulomb14 = b.coulomb14;
  add(&e.virial, b.virial);
  DispersionCorrection::Result dc = m.disp.compute(m.box.volume());
  e.disp_corr = dc.energy;
  e.pres_dc = dc.pressure;
  for (int a = 0; a < 3; ++a) e.virial[a][a] += dc.virial;
  e.disp_corr_virial = dc.virial;
  m.times.other += Impl::lap(&t);
  return e;
}

void ForceCalculator::set_box(const Vec3& b) {
  Impl& m = *impl_;
  const double half_box = 0.5 * std::min({b[0], b[1], b[2]});
  QK_CHECK(m.nb.rc + m.buffer < half_box, "the box shrank to ", b[0], " x ", b[1], " x ", b[2],
           " nm: the pair list's radius ", m.nb.rc + m.buffer, " nm is no longer below half of it (the pressure "
           "coupling compressed the system too far: check ref-p, compressibility and the start structure)");
  m.box = RectBox(b);
  if (m.builds > 0) m.list.set_box(m.box);
  if (m.pme) m.pme->set_box(b);
}

double ForceCalculator::cutoff() const { return impl_->nb.rc; }
double ForceCalculator::rlist() const { return impl_->nb.rc + impl_->buffer; }
std::array<int, 3> ForceCalculator::pme_grid() const {
  return impl_->pme ? impl_->pme->grid() : std::array<int, 3>{0, 0, 0};
}
double ForceCalculator::ewald_beta() const { return impl_->nb.beta; }
double ForceCalculator::average_c6() const { return impl_->disp.average_c6(); }
int64_t ForceCalculator::pair_list_builds() const { return impl_->builds; }
int64_t ForceCalculator::pair_list_prunes() const { return impl_->prunes; }
const ForceTimes& ForceCalculator::times() const { return impl_->times; }
double ForceCalculator::rlist_inner() const { return impl_->nb.rc + impl_->inner; }
int64_t ForceCalculator::num_pairs() const { return impl_->list.num_cluster_pairs() * kClusterPairSize; }

}  // namespace qk::md

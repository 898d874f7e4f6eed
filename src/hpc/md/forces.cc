// ForceCalculator: the sum of the interaction kinds, each in its own file.
#include "qk/hpc/md/forces.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bonded.h"
#include "dispersion_correction.h"
#include "domain_decomposition.h"
#include "nonbonded.h"
#include "nonbonded_gpu.h"
#include "pme_gpu_device.h"
#include "pair_list.h"
#include "pme.h"
#include "qk/base/env.h"
#include "qk/base/error.h"
#include "sub_topology.h"

namespace qk::md {

// The exact lists' buffers (nm) beyond the cut-off (PairListSetup::exact; GROMACS's schedule takes its
// own, verlet_buffer.h); see pair_list.h for why they are exact. The list is built with the outer one and
// pruned to the inner one, which the kernel runs over (GROMACS's dynamic pruning); boxes under
// 2 (rc + outer) get what fits below half the box. On 2 fs SPC water (3 nm box):
// a build every ~33 steps and a prune every ~2; outer 0.2-0.4 and inner 0.03-0.1 nm all ran within 5%
// (a prune is a bounding-box test per cluster pair, much cheaper than the kernel's 16 pairs).
constexpr double kOuterBuffer = 0.4;
constexpr double kInnerBuffer = 0.04;

QK_ENV_BOOL(env_pme_slabs, "QK_MD_PME_SLABS", true,
            "qk md over ranks: PME's FFT split over the ranks in slabs of the grid (pme_slab_fft.h); 0: every rank "
            "transforms the whole grid after an all-reduce of it (the earlier scheme, for comparisons)");

// PME's part of a rank's share: atoms [a0, a1) spread and gathered here; the FFT over the ranks where the
// share can exchange (and QK_MD_PME_SLABS allows), else the grid all-reduced and rank 0 reporting the energy.
PmeShare pme_share_of(const ForceShare& share, int a0, int a1) {
  PmeShare p{a0, a1, share.allreduce_sum, share.rank == 0, share.rank, share.size, {}};
  if (env_pme_slabs.get()) p.exchange = share.exchange;
  return p;
}

struct ForceCalculator::Impl {
  const Topology& top;
  RectBox box;
  NonbondedParams nb;
  PairList list;
  std::unique_ptr<NonbondedKernel> kernel;
  std::unique_ptr<NonbondedGpu> gpu_kernel;  // set_nonbonded_device: the pair list's interactions there
  bool mixed = false;
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
  ForceShare share;
  std::vector<int> share_chunks;  // this rank's exclusion chunks (their bounds), set with the share
  PmeShare pme_share;             // this rank's PME atoms and the grid's sum
  std::vector<double> packed;     // a shared step's forces and terms, summed over the ranks at once
  // Domain decomposition (set_domains): this rank's home atoms then its halo, as a topology of their own
  // (the home atoms' interactions only), the pair kernel on it, positions and forces.
  DomainDecomposition* dd = nullptr;
  int64_t dd_version = -1;
  bool build_next = false;  // the domains given up: the next call builds a list of every atom
  int n_home = 0;
  std::unique_ptr<Topology> local_top;
  std::unique_ptr<NonbondedKernel> local_kernel;
  std::vector<int> local_chunks;
  std::vector<Vec3> x_local, f_local;

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
    mixed = precision == Precision::kMixed;
    kernel = std::make_unique<NonbondedKernel>(t, nb, mixed);
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
    if (builds == 0 || since == 0 || build_next) {
      build_next = false;
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

  // The domain dd has now: its local topology and kernel, the exclusion chunks of its home atoms, PME's share.
  void take_domain() {
    std::vector<int> atoms = dd->home();
    n_home = static_cast<int>(atoms.size());
    atoms.insert(atoms.end(), dd->halo().begin(), dd->halo().end());
    auto fresh = std::make_unique<Topology>(select_atoms(top, atoms, local_indices(top.num_atoms(), atoms), n_home));
    if (local_kernel) {
      local_kernel->set_topology(*fresh);  // its tables stay (the float kernel's Ewald fit takes milliseconds)
    } else {
      local_kernel = std::make_unique<NonbondedKernel>(*fresh, nb, mixed);
    }
    local_top = std::move(fresh);
    local_chunks.clear();
    for (int b : md::exclusion_chunks(*local_top, 16))  // the halo has no exclusions: any bound below n_home holds
      if (b < n_home) local_chunks.push_back(b);
    local_chunks.push_back(n_home);
    if (local_chunks.size() < 2) local_chunks.insert(local_chunks.begin(), 0);
    pme_share = pme_share_of(share, 0, n_home);
    dd_version = dd->version();
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

namespace {

void add_matrix(Mat3* to, const Mat3& v) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) (*to)[a][b] += v[a][b];
}

void add_bonded(const BondedEnergies& b, PotentialTerms* e) {
  e->bond = b.bond;
  e->angle = b.angle;
  e->proper_dih = b.proper_dih;
  e->rb_dih = b.rb_dih;
  e->improper_dih = b.improper_dih;
  e->periodic_improper_dih = b.periodic_improper_dih;
  e->lj14 = b.lj14;
  e->coulomb14 = b.coulomb14;
  add_matrix(&e->virial, b.virial);
}

void add_dispersion(const DispersionCorrection::Result& dc, PotentialTerms* e) {
  e->disp_corr = dc.energy;
  e->pres_dc = dc.pressure;
  for (int a = 0; a < 3; ++a) e->virial[a][a] += dc.virial;
  e->disp_corr_virial = dc.virial;
}

}  // namespace

ForceCalculator::ForceCalculator(const Topology& top, const MdpOptions& mdp, const Vec3& box, Precision precision,
                                 const PairListSetup& lists)
    : impl_(std::make_unique<Impl>(top, mdp, box, precision, lists)) {}
ForceCalculator::~ForceCalculator() = default;

PotentialTerms ForceCalculator::compute(const std::vector<Vec3>& x, std::vector<Vec3>* f, bool energies,
                                        int64_t step) {
  Impl& m = *impl_;
  if (m.dd) return compute_domain(x, f, energies, step);
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
  m.times.other += Impl::lap(&t);
  // Shared (ForceShare): this rank's part of each kind; the sum over the ranks below.
  const ForceShare& sh = m.share;
  const bool shared = sh.size > 1, lead = sh.rank == 0;
  const EntryRange entries = shared ? entry_share(m.list, sh.rank, sh.size) : EntryRange{};
  // On a GPU the pair forces run while the CPU does the excluded pairs' corrections and PME (finished below).
  NonbondedEnergies pairs;
  if (m.gpu_kernel) {
    m.gpu_kernel->launch(m.list, x, energies, entries);
  } else {
    pairs = m.kernel->compute(m.list, x, energies, f, entries);
  }
  const std::vector<int>& chunks = shared ? m.share_chunks : m.exclusion_chunks;
  NonbondedEnergies excl;
  if (!shared || chunks.size() >= 2) excl = coulomb_exclusions_and_self(x, m.box, m.top, m.nb, f, chunks);
  m.times.nonbonded += Impl::lap(&t);
  if (m.pme)
    e.coul_recip = m.pme->compute(x, m.top.charge, f, energies ? &e.virial : nullptr, shared ? &m.pme_share : nullptr);
  m.times.pme += Impl::lap(&t);
  if (m.gpu_kernel) {
    pairs = m.gpu_kernel->finish(m.list, x, f);
    m.times.nonbonded += Impl::lap(&t);  // the wait for the GPU
  }
  e.lj_sr = pairs.lj;
  e.coulomb_sr = pairs.coulomb + excl.coulomb;
  add_matrix(&e.virial, pairs.virial);
  add_matrix(&e.virial, excl.virial);
  if (shared && !lead) {  // the bonded terms and the dispersion correction: the first rank's
    m.times.other += Impl::lap(&t);
    sum_over_ranks(&e, f);
    m.times.other += Impl::lap(&t);
    return e;
  }
  add_bonded(bonded_forces(x, m.box, m.top, m.epsilon_r, f), &e);
  add_dispersion(m.disp.compute(m.box.volume()), &e);
  if (shared) sum_over_ranks(&e, f);
  m.times.other += Impl::lap(&t);
  return e;
}

// This rank's domain: its home atoms' forces (x and f in dd's home order) and its part of the terms.
PotentialTerms ForceCalculator::compute_domain(const std::vector<Vec3>& x, std::vector<Vec3>* f, bool energies,
                                               int64_t step) {
  Impl& m = *impl_;
  DomainDecomposition& dd = *m.dd;
  QK_CHECK(x.size() == dd.home().size(), "ForceCalculator: ", x.size(), " positions for a domain of ",
           dd.home().size(), " home atoms");
  const int64_t s = step >= 0 ? step : m.calls;
  ++m.calls;
  auto t = Impl::Clock::now();
  const bool fresh = dd.version() != m.dd_version;
  if (fresh) m.take_domain();
  const int nh = m.n_home, nl = nh + static_cast<int>(dd.halo().size());
  m.x_local.resize(nl);
  std::copy(x.begin(), x.end(), m.x_local.begin());
  m.times.other += Impl::lap(&t);
  dd.exchange_positions(x.data(), m.x_local.data() + nh);
  m.times.communication += Impl::lap(&t);
  // Built when the domain is new, pruned on the schedule between (update_list_on_schedule's).
  const int64_t since = s % m.lists.nstlist;
  if (fresh) {
    m.list.build(m.x_local, m.box, m.nb.rc + m.buffer, m.local_top->exclusions, PairListDomain{nh, dd.open_axes()});
    ++m.builds;
    m.times.list_build += Impl::lap(&t);
  }
  if (m.inner < m.buffer &&
      (fresh || (m.lists.nstlist_prune > 0 && since > 0 && since % m.lists.nstlist_prune == 0))) {
    m.list.prune(m.x_local, m.nb.rc + m.inner);
    ++m.prunes;
    m.times.list_prune += Impl::lap(&t);
  }
  m.f_local.assign(nl, Vec3{0, 0, 0});
  PotentialTerms e;
  const NonbondedEnergies pairs = m.local_kernel->compute(m.list, m.x_local, energies, &m.f_local);
  const NonbondedEnergies excl =
      coulomb_exclusions_and_self(m.x_local, m.box, *m.local_top, m.nb, &m.f_local, m.local_chunks);
  m.times.nonbonded += Impl::lap(&t);
  if (m.pme)
    e.coul_recip = m.pme->compute(m.x_local, m.local_top->charge, &m.f_local, energies ? &e.virial : nullptr,
                                  &m.pme_share);
  m.times.pme += Impl::lap(&t);
  e.lj_sr = pairs.lj;
  e.coulomb_sr = pairs.coulomb + excl.coulomb;
  add_matrix(&e.virial, pairs.virial);
  add_matrix(&e.virial, excl.virial);
  add_bonded(bonded_forces(m.x_local, m.box, *m.local_top, m.epsilon_r, &m.f_local), &e);
  if (dd.rank() == 0) add_dispersion(m.disp.compute(m.box.volume()), &e);
  m.times.other += Impl::lap(&t);
  dd.return_halo_forces(m.f_local.data() + nh, m.f_local.data());
  f->assign(m.f_local.begin(), m.f_local.begin() + nh);
  if (energies) sum_over_ranks(&e, nullptr);
  m.times.communication += Impl::lap(&t);
  return e;
}

// The ranks' parts summed (one all-reduce of the forces and the terms): every rank then holds the totals.
void ForceCalculator::sum_over_ranks(PotentialTerms* e, std::vector<Vec3>* f) {
  Impl& m = *impl_;
  double* terms[] = {&e->lj_sr,     &e->disp_corr,       &e->coulomb_sr,   &e->coul_recip,
                     &e->bond,      &e->angle,           &e->lj14,         &e->coulomb14,
                     &e->proper_dih, &e->rb_dih,         &e->improper_dih, &e->periodic_improper_dih,
                     &e->pres_dc,   &e->disp_corr_virial};
  constexpr size_t kTerms = sizeof(terms) / sizeof(terms[0]);
  const size_t nf = f ? 3 * f->size() : 0;
  m.packed.resize(nf + kTerms + 9);
  double* p = m.packed.data();
  for (size_t i = 0; i < nf / 3; ++i)
    for (int c = 0; c < 3; ++c) p[3 * i + c] = (*f)[i][c];
  for (size_t k = 0; k < kTerms; ++k) p[nf + k] = *terms[k];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) p[nf + kTerms + 3 * a + b] = e->virial[a][b];
  m.share.allreduce_sum(p, static_cast<int64_t>(m.packed.size()));
  if (m.share.broadcast_first) m.share.broadcast_first(p, static_cast<int64_t>(m.packed.size()));
  for (size_t i = 0; i < nf / 3; ++i)
    for (int c = 0; c < 3; ++c) (*f)[i][c] = p[3 * i + c];
  for (size_t k = 0; k < kTerms; ++k) *terms[k] = p[nf + k];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) e->virial[a][b] = p[nf + kTerms + 3 * a + b];
}

void ForceCalculator::set_domains(DomainDecomposition* dd) {
  Impl& m = *impl_;
  if (dd) {
    QK_CHECK(!m.lists.exact, "ForceCalculator: domains need the pair list on fixed intervals (a Verlet buffer "
                             "tolerance), not exact lists");
    QK_CHECK(!m.gpu_kernel && (!m.pme || !m.pme->device()),
             "ForceCalculator: domains run on the CPU (-nb cpu -pme cpu)");
    QK_CHECK(dd->topology().num_atoms() == m.top.num_atoms(), "ForceCalculator: a domain decomposition of ",
             dd->topology().num_atoms(), " atoms for a topology of ", m.top.num_atoms());
    QK_CHECK(m.share.size == dd->size() && m.share.rank == dd->rank(), "ForceCalculator: set_share first, with "
             "the domain decomposition's rank and size");
  }
  m.dd = dd;
  m.dd_version = -1;
  if (!dd) {  // the share's parts again, a list of every atom at the next call
    set_share(m.share);
    m.build_next = true;
  }
}

void ForceCalculator::set_nonbonded_device(MdDevice device) {
  Impl& m = *impl_;
  QK_CHECK(device == MdDevice::kCpu || !m.dd, "the non-bonded forces on a GPU: not with domain decomposition "
                                              "(-nb cpu, or force decomposition)");
  if (device == MdDevice::kCpu) {
    m.gpu_kernel.reset();
    return;
  }
  check_nonbonded_device(device, m.mixed ? Precision::kMixed : Precision::kDouble);
  m.gpu_kernel = std::make_unique<NonbondedGpu>(
      m.top, m.nb, device == MdDevice::kGpu ? gpu::cuda_nb_device() : gpu::host_nb_device());
}

void ForceCalculator::check_nonbonded_device(MdDevice device, Precision precision) {
  if (device == MdDevice::kCpu) return;
  QK_CHECK(precision == Precision::kMixed, "the non-bonded forces on a GPU are single precision (GROMACS's GPU "
                                           "kernels are too): run them in mixed precision (without -double) or on "
                                           "the CPU (-nb cpu)");
  std::string why;
  if (device == MdDevice::kGpu && !gpu::cuda_nb_available(&why))
    QK_THROW(DeviceError, "the non-bonded forces on a GPU: ", why, "; run them on the CPU (-nb cpu)");
}

void ForceCalculator::check_pme_device(MdDevice device, Precision precision) {
  if (device == MdDevice::kCpu) return;
  QK_CHECK(precision == Precision::kMixed, "PME on a GPU is single precision (as GROMACS's): run it in mixed "
                                           "precision (without -double) or on the CPU (-pme cpu)");
  std::string why;
  if (device == MdDevice::kGpu && !gpu::cuda_nb_available(&why))
    QK_THROW(DeviceError, "PME on a GPU: ", why, "; run it on the CPU (-pme cpu)");
}

void ForceCalculator::set_pme_device(MdDevice device) {
  Impl& m = *impl_;
  QK_CHECK(device == MdDevice::kCpu || m.pme, "PME on a GPU: the mdp's coulombtype is not PME");
  check_pme_device(device, m.mixed ? Precision::kMixed : Precision::kDouble);
  QK_CHECK(device == MdDevice::kCpu || m.share.size == 1,
           "PME on a GPU runs on one rank: run it on the CPU (-pme cpu) when the forces are shared over ", m.share.size,
           " ranks");
  if (!m.pme) return;
  m.pme->set_device(device == MdDevice::kCpu  ? nullptr
                    : device == MdDevice::kGpu ? gpu::cuda_pme_device()
                                               : gpu::host_pme_device());
}

std::string ForceCalculator::pme_device_name() const {
  if (!impl_->pme) return "none";
  return impl_->pme->device() ? impl_->pme->device()->name() : "cpu";
}

std::string ForceCalculator::nonbonded_device_name() const {
  return impl_->gpu_kernel ? impl_->gpu_kernel->device().name() : "cpu";
}

void ForceCalculator::set_share(const ForceShare& share) {
  QK_CHECK(share.size >= 1 && share.rank >= 0 && share.rank < share.size, "ForceCalculator: rank ", share.rank,
           " of ", share.size, " is not a rank of the share");
  QK_CHECK(share.size == 1 || share.allreduce_sum, "ForceCalculator: a share over ", share.size,
           " ranks needs its allreduce_sum");
  Impl& m = *impl_;
  m.share = share;
  // This rank's consecutive exclusion chunks (the bounds of chunks k0..k1) and PME atoms.
  const int nchunks = static_cast<int>(m.exclusion_chunks.size()) - 1;
  const int k0 = nchunks * share.rank / share.size, k1 = nchunks * (share.rank + 1) / share.size;
  m.share_chunks.assign(m.exclusion_chunks.begin() + k0, m.exclusion_chunks.begin() + k1 + 1);
  const int n = m.top.num_atoms();
  m.pme_share = pme_share_of(share, n * share.rank / share.size, n * (share.rank + 1) / share.size);
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

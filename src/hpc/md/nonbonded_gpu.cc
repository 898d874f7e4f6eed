#include "nonbonded_gpu.h"

#include <algorithm>
#include <cmath>

#include "qk/base/error.h"
#include "qk/hpc/md/units.h"

namespace qk::md {

namespace gpu {

namespace {

// The CUDA kernel's work, lane by lane on the host: one "warp" of 32 lanes per entry, lane = 16 h +
// 4 ii + jj doing i-slot ii against j-slot jj of cluster pair base + h; j forces summed over ii per
// pass, i forces over jj and h at the end of the entry.
class HostNbDevice final : public NbDevice {
 public:
  std::string name() const override { return "host emulation of the CUDA kernel"; }
  void set_params(const NbConsts& k, const std::vector<float>& c6, const std::vector<float>& c12) override {
    k_ = k;
    c6_ = c6;
    c12_ = c12;
  }
  void set_types(const std::vector<int>& type) override { type_ = type; }
  void set_list(const std::vector<NbEntry>& entries, const std::vector<int>& cj, const std::vector<uint16_t>& mask,
                const std::vector<float>& shifts) override {
    entries_ = entries;
    cj_ = cj;
    mask_ = mask;
    shifts_ = shifts;
  }
  // The work is done at the launch (the host has nothing to overlap it with).
  void launch(const std::vector<float>& xq, int64_t e0, int64_t e1, bool energies) override {
    const size_t nslots = xq.size() / 4;
    f_.assign(3 * nslots, 0.0f);
    sums_.assign(kNbSums, 0.0);
    for (int64_t e = e0; e < e1; ++e) {
      if (k_.ewald) {
        energies ? entry<true, true>(xq, e, &f_, &sums_) : entry<true, false>(xq, e, &f_, &sums_);
      } else {
        energies ? entry<false, true>(xq, e, &f_, &sums_) : entry<false, false>(xq, e, &f_, &sums_);
      }
    }
  }
  void finish(std::vector<float>* f, std::vector<double>* sums) override {
    *f = f_;
    *sums = sums_;
  }

 private:
  template <bool kEwald, bool kEnergy>
  void entry(const std::vector<float>& xq, int64_t e, std::vector<float>* f, std::vector<double>* sums) const {
    const size_t nslots = xq.size() / 4;
    const NbEntry en = entries_[static_cast<size_t>(e)];
    float fi[32][3] = {}, vlj[32] = {}, vc[32] = {};
    for (int base = en.begin; base < en.end; base += 2) {
      float fj[32][3] = {};
      for (int lane = 0; lane < 32; ++lane) {
        const int h = lane >> 4, ii = (lane >> 2) & 3, jj = lane & 3, pr = base + h;
        if (pr >= en.end) continue;
        const int si = en.ci * 4 + ii, sj = cj_[static_cast<size_t>(pr)] * 4 + jj;
        if (!((mask_[static_cast<size_t>(pr)] >> (lane & 15)) & 1u)) continue;
        const float* xi = &xq[4 * static_cast<size_t>(si)];
        const float* xj = &xq[4 * static_cast<size_t>(sj)];
        const float* sv = &shifts_[3 * static_cast<size_t>(en.shift)];
        const float dx = (xi[0] - sv[0]) - xj[0], dy = (xi[1] - sv[1]) - xj[1], dz = (xi[2] - sv[2]) - xj[2];
        const float r2 = dx * dx + dy * dy + dz * dz;
        if (!(r2 < k_.rc2)) continue;
        const int t = type_[static_cast<size_t>(si)] * k_.ntypes + type_[static_cast<size_t>(sj)];
        const NbPair p = nb_pair<kEwald, kEnergy>(k_, r2, k_.qfac * xi[3] * xj[3], c6_[static_cast<size_t>(t)],
                                                  c12_[static_cast<size_t>(t)]);
        const float d[3] = {dx, dy, dz};
        for (int c = 0; c < 3; ++c) {
          fi[lane][c] += p.fscal * d[c];
          fj[lane][c] = p.fscal * d[c];
        }
        vlj[lane] += p.vlj;
        vc[lane] += p.vc;
      }
      for (int h = 0; h < 2 && base + h < en.end; ++h)
        for (int jj = 0; jj < 4; ++jj) {
          const size_t sj = static_cast<size_t>(cj_[static_cast<size_t>(base + h)]) * 4 + jj;
          for (int c = 0; c < 3; ++c) {
            float s = 0;
            for (int ii = 0; ii < 4; ++ii) s += fj[16 * h + 4 * ii + jj][c];
            (*f)[c * nslots + sj] -= s;
          }
        }
    }
    for (int ii = 0; ii < 4; ++ii) {
      const size_t si = static_cast<size_t>(en.ci) * 4 + ii;
      for (int c = 0; c < 3; ++c) {
        float s = 0;
        for (int h = 0; h < 2; ++h)
          for (int jj = 0; jj < 4; ++jj) s += fi[16 * h + 4 * ii + jj][c];
        (*f)[c * nslots + si] += s;
        if constexpr (kEnergy) (*sums)[2 + 3 * static_cast<size_t>(en.shift) + c] += s;
      }
    }
    if constexpr (kEnergy)
      for (int lane = 0; lane < 32; ++lane) {
        (*sums)[0] += vlj[lane];
        (*sums)[1] += vc[lane];
      }
  }

  NbConsts k_;
  std::vector<float> c6_, c12_, shifts_, f_;
  std::vector<double> sums_;
  std::vector<int> type_, cj_;
  std::vector<uint16_t> mask_;
  std::vector<NbEntry> entries_;
};

}  // namespace

std::unique_ptr<NbDevice> host_nb_device() { return std::make_unique<HostNbDevice>(); }

void nb_device_error(const std::string& what) { QK_THROW(DeviceError, what); }

#ifndef QK_MD_CUDA
bool cuda_nb_available(std::string* why) {
  if (why) *why = "this build of qianka has no CUDA (the CUDA toolkit was not found when it was configured)";
  return false;
}
std::unique_ptr<NbDevice> cuda_nb_device() {
  std::string why;
  cuda_nb_available(&why);
  QK_CHECK_AS(DeviceError, false, "the non-bonded forces on a GPU: ", why, "; run them on the CPU (-nb cpu)");
  return nullptr;
}
#endif

}  // namespace gpu

NonbondedGpu::NonbondedGpu(const Topology& top, const NonbondedParams& p, std::unique_ptr<gpu::NbDevice> device)
    : top_(top), device_(std::move(device)) {
  QK_CHECK(device_ != nullptr, "NonbondedGpu: no device");
  gpu::NbConsts k;
  k.rc2 = static_cast<float>(p.rc * p.rc);
  k.qfac = static_cast<float>(p.coulomb_factor);
  k.ewald = p.ewald ? 1 : 0;
  k.beta = static_cast<float>(p.beta);
  k.beta_exp = static_cast<float>(2 * p.beta / std::sqrt(units::kPi));
  k.ewald_shift = static_cast<float>(p.ewald_shift);
  k.krf = static_cast<float>(p.krf);
  k.crf = static_cast<float>(p.crf);
  k.lj_shift6 = static_cast<float>(p.lj_shift6);
  k.lj_shift12 = static_cast<float>(p.lj_shift12);
  k.ntypes = top.num_types();
  std::vector<float> c6, c12;
  for (size_t t = 0; t < top.pair_c6.size(); ++t) {
    c6.push_back(static_cast<float>(6 * top.pair_c6[t]));
    c12.push_back(static_cast<float>(12 * top.pair_c12[t]));
  }
  device_->set_params(k, c6, c12);
}

void NonbondedGpu::launch(const PairList& list, const std::vector<Vec3>& x, bool energies, EntryRange range) {
  const std::vector<int>& slot_atom = list.slot_atom();
  const std::vector<Vec3>& offset = list.slot_offset();
  const size_t nslots = slot_atom.size();
  if (list.build_count() != list_build_) {  // a new cluster order: types and charges per slot
    list_build_ = list.build_count();
    std::vector<int> type(nslots, 0);
    slot_q_.assign(nslots, 0.0f);
    for (size_t s = 0; s < nslots; ++s)
      if (slot_atom[s] >= 0) {
        type[s] = top_.type[static_cast<size_t>(slot_atom[s])];
        slot_q_[s] = static_cast<float>(top_.charge[static_cast<size_t>(slot_atom[s])]);
      }
    device_->set_types(type);
  }
  if (list.version() != list_version_) {
    list_version_ = list.version();
    const auto& entries = list.entries();
    QK_CHECK(list.num_cluster_pairs() < INT32_MAX, "the non-bonded forces on a GPU: ", list.num_cluster_pairs(),
             " cluster pairs are more than the kernel indexes");
    std::vector<gpu::NbEntry> en(entries.size());
    for (size_t e = 0; e < entries.size(); ++e)
      en[e] = {entries[e].ci, entries[e].shift, static_cast<int>(entries[e].begin), static_cast<int>(entries[e].end)};
    std::vector<float> shifts;
    for (const Vec3& s : list.shifts())
      for (int c = 0; c < 3; ++c) shifts.push_back(static_cast<float>(s[c]));
    device_->set_list(en, list.j_clusters(), list.masks(), shifts);
    ++list_uploads_;
  }
  xq_.resize(4 * nslots);
  for (size_t s = 0; s < nslots; ++s) {
    const int a = slot_atom[s];
    for (int c = 0; c < 3; ++c)
      xq_[4 * s + c] = a < 0 ? 0.0f : static_cast<float>(x[static_cast<size_t>(a)][c] - offset[s][c]);
    xq_[4 * s + 3] = slot_q_[s];
  }
  const int64_t all = static_cast<int64_t>(list.entries().size());
  const int64_t e0 = std::clamp<int64_t>(range.begin, 0, all), e1 = std::clamp<int64_t>(range.end, e0, all);
  device_->launch(xq_, e0, e1, energies);
  launched_ = true;
  energies_ = energies;
}

NonbondedEnergies NonbondedGpu::finish(const PairList& list, const std::vector<Vec3>& x, std::vector<Vec3>* f) {
  QK_CHECK_AS(InternalError, launched_, "NonbondedGpu::finish without a launch");
  launched_ = false;
  const bool energies = energies_;
  device_->finish(&f_, &sums_);
  const std::vector<int>& slot_atom = list.slot_atom();
  const std::vector<Vec3>& offset = list.slot_offset();
  const size_t nslots = slot_atom.size();
  // Slot forces to atoms; the virial as the CPU kernel's: -1/2 (sum_slots x (x) F - sum_shifts S (x) F_S).
  NonbondedEnergies total;
  Mat3& vir = total.virial;
  for (size_t s = 0; s < nslots; ++s) {
    const int a = slot_atom[s];
    if (a < 0) continue;
    const Vec3 fa{f_[s], f_[nslots + s], f_[2 * nslots + s]};
    for (int c = 0; c < 3; ++c) (*f)[static_cast<size_t>(a)][c] += fa[c];
    if (!energies) continue;
    const Vec3 xs{x[static_cast<size_t>(a)][0] - offset[s][0], x[static_cast<size_t>(a)][1] - offset[s][1],
                  x[static_cast<size_t>(a)][2] - offset[s][2]};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) vir[r][c] -= 0.5 * xs[r] * fa[c];
  }
  if (energies) {
    total.lj = sums_[0];
    total.coulomb = sums_[1];
    for (int sh = 0; sh < 27; ++sh)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) vir[r][c] += 0.5 * list.shifts()[sh][r] * sums_[2 + 3 * sh + c];
  }
  return total;
}

NonbondedEnergies NonbondedGpu::compute(const PairList& list, const std::vector<Vec3>& x, bool energies,
                                        std::vector<Vec3>* f, EntryRange range) {
  launch(list, x, energies, range);
  return finish(list, x, f);
}

}  // namespace qk::md

// The non-bonded offload (nonbonded_gpu.h): the GPU kernel's arithmetic and
// data layout, emulated on the host, give the CPU kernel's forces, energies
// and virial to a float's rounding; the list goes to the device only when it
// changes; an MD run with it follows the CPU run. On a machine with a CUDA
// GPU the same comparisons run on the GPU itself (skipped elsewhere;
// scripts/device-check.sh runs them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "nonbonded_gpu.h"
#include "qk/base/error.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/md.h"
#include "reference_energies.h"

namespace {

using qk::md::MdDevice;
using qk::md::PotentialTerms;
using qk::md::Vec3;

using qk::md::test::max_norm;

// A fixture's forces and terms on the CPU kernel and on `device`, mixed precision, on a step that
// reports energies and one that does not, with the list built and then pruned and reused.
void expect_device_equals_cpu(const std::string& system, MdDevice device) {
  SCOPED_TRACE(system);
  const qk::md::test::Fixture fx(system);
  const std::vector<Vec3> x = fx.x();
  qk::md::ForceCalculator cpu(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
  qk::md::ForceCalculator dev(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
  dev.set_nonbonded_device(device);
  EXPECT_EQ(cpu.nonbonded_device_name(), "cpu");
  EXPECT_NE(dev.nonbonded_device_name(), "cpu");
  for (int call = 0; call < 3; ++call) {
    const bool energies = call != 1;
    std::vector<Vec3> fc, fd;
    const PotentialTerms ec = cpu.compute(x, &fc, energies, call), ed = dev.compute(x, &fd, energies, call);
    ASSERT_EQ(fc.size(), fd.size());
    const double scale = max_norm(fc);
    ASSERT_GT(scale, 0);
    double worst = 0;
    for (size_t a = 0; a < fc.size(); ++a)
      for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(fc[a][c] - fd[a][c]));
    // The CPU float kernel takes Ewald's erfc from a fitted polynomial and 1/r from refined estimates; the
    // GPU's from erfcf and a division: a float's rounding apart, as mixed precision is from double (5e-6).
    EXPECT_LT(worst / scale, 2e-5) << "call " << call;
    if (!energies) continue;
    EXPECT_NEAR(ed.lj_sr, ec.lj_sr, 2e-5 * std::abs(ec.lj_sr) + 1e-6) << "call " << call;
    EXPECT_NEAR(ed.coulomb_sr, ec.coulomb_sr, 2e-5 * std::abs(ec.coulomb_sr) + 1e-6) << "call " << call;
    EXPECT_DOUBLE_EQ(ed.coul_recip, ec.coul_recip);  // PME stays on the CPU
    double vscale = 0;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) vscale = std::max(vscale, std::abs(ec.virial[r][c]));
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(ed.virial[r][c], ec.virial[r][c], 2e-5 * vscale) << r << c;
  }
}

TEST(NonbondedGpu, EmulatedKernelEqualsTheCpuKernel) {
  // Ewald (PME water), reaction field, LJ alone (argon), a peptide with exclusions and several atom types.
  for (const char* system : {"water_pme", "water_rf", "argon", "peptide_water"})
    expect_device_equals_cpu(system, MdDevice::kGpuEmulated);
}

TEST(NonbondedGpu, OnTheGpuEqualsTheCpuKernel) {
  std::string why;
  if (!qk::md::gpu::cuda_nb_available(&why)) GTEST_SKIP() << why;
  for (const char* system : {"water_pme", "water_rf", "argon"}) expect_device_equals_cpu(system, MdDevice::kGpu);
  // The peptide's force field comes from GROMACS's data folder, which a GPU machine may not have.
  if (std::filesystem::exists(qk::md::gromacs_top_dir() + "/amber99sb-ildn.ff"))
    expect_device_equals_cpu("peptide_water", MdDevice::kGpu);
}

// A device that counts what it is sent and runs the emulation.
class CountingDevice final : public qk::md::gpu::NbDevice {
 public:
  explicit CountingDevice(int* lists, int* types, int* runs)
      : inner_(qk::md::gpu::host_nb_device()), lists_(lists), types_(types), runs_(runs) {}
  std::string name() const override { return "counting"; }
  void set_params(const qk::md::gpu::NbConsts& k, const std::vector<float>& c6, const std::vector<float>& c12) override {
    inner_->set_params(k, c6, c12);
  }
  void set_types(const std::vector<int>& t) override {
    ++*types_;
    inner_->set_types(t);
  }
  void set_list(const std::vector<qk::md::gpu::NbEntry>& e, const std::vector<int>& cj,
                const std::vector<uint16_t>& m, const std::vector<float>& s) override {
    ++*lists_;
    inner_->set_list(e, cj, m, s);
  }
  void launch(const std::vector<float>& xq, int64_t e0, int64_t e1, bool energies) override {
    ++*runs_;
    inner_->launch(xq, e0, e1, energies);
  }
  void finish(std::vector<float>* f, std::vector<double>* sums) override { inner_->finish(f, sums); }

 private:
  std::unique_ptr<qk::md::gpu::NbDevice> inner_;
  int *lists_, *types_, *runs_;
};

// The list goes up after a build, a prune or a new box, and not on a step that reuses it; the slots' types
// only after a build.
TEST(NonbondedGpu, TheListGoesToTheDeviceOnlyWhenItChanges) {
  const qk::md::test::Fixture fx("water_pme");
  std::vector<Vec3> x = fx.x();
  qk::md::NonbondedParams p;
  p.rc = fx.mdp.rcoulomb;
  p.finish();  // reaction field: enough to drive the list traffic
  int lists = 0, types = 0, runs = 0;
  qk::md::NonbondedGpu nb(fx.top, p, std::make_unique<CountingDevice>(&lists, &types, &runs));
  qk::md::PairList list;
  qk::md::RectBox box(fx.conf.box);
  list.build(x, box, p.rc + 0.1, fx.top.exclusions);
  std::vector<Vec3> f(x.size(), Vec3{0, 0, 0});
  nb.compute(list, x, true, &f);
  nb.compute(list, x, false, &f);
  EXPECT_EQ(lists, 1);
  EXPECT_EQ(types, 1);
  EXPECT_EQ(runs, 2);
  list.prune(x, p.rc + 0.05);
  nb.compute(list, x, true, &f);
  EXPECT_EQ(lists, 2);
  EXPECT_EQ(types, 1);
  list.set_box(box);
  nb.compute(list, x, true, &f);
  EXPECT_EQ(lists, 3);
  list.build(x, box, p.rc + 0.1, fx.top.exclusions);
  nb.compute(list, x, true, &f);
  EXPECT_EQ(lists, 4);
  EXPECT_EQ(types, 2);
  EXPECT_EQ(nb.list_uploads(), 4);
}

// Ranks sharing the forces (ForceShare) each run a range of the list's entries: the ranges' forces and
// energies add up to the whole list's.
TEST(NonbondedGpu, EntryRangesAddUpToTheWholeList) {
  const qk::md::test::Fixture fx("water_rf");
  const std::vector<Vec3> x = fx.x();
  qk::md::NonbondedParams p;
  p.rc = fx.mdp.rcoulomb;
  p.epsilon_rf = fx.mdp.epsilon_rf;
  p.finish();
  qk::md::NonbondedGpu nb(fx.top, p, qk::md::gpu::host_nb_device());
  qk::md::PairList list;
  list.build(x, qk::md::RectBox(fx.conf.box), p.rc + 0.1, fx.top.exclusions);
  std::vector<Vec3> whole(x.size(), Vec3{0, 0, 0}), parts = whole;
  const qk::md::NonbondedEnergies all = nb.compute(list, x, true, &whole);
  double lj = 0, coulomb = 0;
  for (int rank = 0; rank < 3; ++rank) {
    const qk::md::NonbondedEnergies e = nb.compute(list, x, true, &parts, qk::md::entry_share(list, rank, 3));
    lj += e.lj;
    coulomb += e.coulomb;
  }
  EXPECT_NEAR(lj, all.lj, 1e-9 * std::abs(all.lj));
  EXPECT_NEAR(coulomb, all.coulomb, 1e-9 * std::abs(all.coulomb));
  const double scale = max_norm(whole);
  for (size_t a = 0; a < x.size(); ++a)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(parts[a][c], whole[a][c], 1e-6 * scale) << a;
}

// 20 MD steps of PME water with the pair forces on the emulated GPU follow the CPU run (mixed precision
// both; chaotic dynamics, so a short run and a loose tolerance).
TEST(NonbondedGpu, MdOnTheEmulatedGpuFollowsTheCpuRun) {
  const qk::md::test::Fixture fx("water_pme");
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 20;
  mdp.nstenergy = 10;
  qk::md::RunOptions cpu, dev;
  dev.nonbonded = MdDevice::kGpuEmulated;
  const qk::md::RunResult a = qk::md::run(fx.top, mdp, fx.conf, cpu), b = qk::md::run(fx.top, mdp, fx.conf, dev);
  ASSERT_EQ(a.frames.size(), b.frames.size());
  ASSERT_FALSE(a.frames.empty());
  for (size_t k = 0; k < a.frames.size(); ++k) {
    const double pa = a.frames[k].potential.potential(), pb = b.frames[k].potential.potential();
    EXPECT_NEAR(pb, pa, 1e-5 * std::abs(pa)) << "step " << a.frames[k].step;
    EXPECT_NEAR(b.frames[k].temperature, a.frames[k].temperature, 1e-3) << "step " << a.frames[k].step;
  }
}

TEST(NonbondedGpu, RefusesDoublePrecisionAndSaysWhyThereIsNoGpu) {
  const qk::md::test::Fixture fx("water_pme");
  qk::md::ForceCalculator dbl(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kDouble);
  EXPECT_THROW(dbl.set_nonbonded_device(MdDevice::kGpuEmulated), qk::ValueError);
  std::string why;
  if (qk::md::gpu::cuda_nb_available(&why)) GTEST_SKIP() << "a GPU is here";
  EXPECT_FALSE(why.empty());
  qk::md::ForceCalculator mixed(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
  try {
    mixed.set_nonbonded_device(MdDevice::kGpu);
    FAIL() << "no GPU here, yet -nb gpu was taken";
  } catch (const qk::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("-nb cpu"), std::string::npos) << e.what();
  }
}

}  // namespace

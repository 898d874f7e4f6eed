// PME on a GPU (-pme gpu): its kernels' arithmetic and layout, emulated on
// the host (pme_gpu.cc), give the CPU's PME forces, energy and virial to a
// float's rounding, through Pme and through ForceCalculator; an MD run with
// it follows the CPU run; what it cannot do is refused. On a CUDA machine
// the same comparison runs on the GPU (skipped elsewhere; device-check).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "nonbonded_gpu_device.h"
#include "pme.h"
#include "pme_gpu_device.h"
#include "qk/base/error.h"
#include "qk/hpc/md/forces.h"
#include "qk/hpc/md/md.h"
#include "reference_energies.h"

namespace {

using qk::md::MdDevice;
using qk::md::Vec3;

using qk::md::test::max_norm;

void expect_pme_device_equals_cpu(std::unique_ptr<qk::md::gpu::PmeDevice> device) {
  const qk::md::test::Fixture fx("water_pme");
  const std::vector<Vec3> x = fx.x();
  const double beta = qk::md::ewald_coefficient(fx.mdp.rcoulomb, fx.mdp.ewald_rtol);
  const auto grid = qk::md::pme_grid_size(fx.conf.box, fx.mdp.fourier_spacing, fx.mdp.pme_order);
  qk::md::Pme cpu(fx.conf.box, grid, fx.mdp.pme_order, beta, fx.mdp.epsilon_r);
  qk::md::Pme dev(fx.conf.box, grid, fx.mdp.pme_order, beta, fx.mdp.epsilon_r);
  dev.set_device(std::move(device));
  std::vector<Vec3> fc(x.size(), Vec3{0, 0, 0}), fd = fc;
  qk::md::Mat3 vc{}, vd{};
  const double ec = cpu.compute(x, fx.top.charge, &fc, &vc), ed = dev.compute(x, fx.top.charge, &fd, &vd);
  EXPECT_NEAR(ed, ec, 1e-5 * std::abs(ec));
  const double scale = max_norm(fc);
  ASSERT_GT(scale, 0);
  double worst = 0;
  for (size_t a = 0; a < x.size(); ++a)
    for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(fd[a][c] - fc[a][c]));
  EXPECT_LT(worst / scale, 1e-4);  // single precision spreading, transforms and gathering
  double vs = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) vs = std::max(vs, std::abs(vc[r][c]));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(vd[r][c], vc[r][c], 1e-4 * vs) << r << c;
  // A forces-only step: the same forces (to the rounding of the GPU's atomic adds, whose order varies), no
  // energy.
  std::vector<Vec3> f2(x.size(), Vec3{0, 0, 0});
  EXPECT_EQ(dev.compute(x, fx.top.charge, &f2, nullptr), 0);
  for (size_t a = 0; a < x.size(); ++a)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(f2[a][c], fd[a][c], 1e-6 * scale);
}

// A box that is not a cube, odd grid sizes, pme-order 5, and a new box (pressure coupling) for the same
// grid: the device's layout and conventions beyond the fixture's cube, 24^3 and order 4.
void expect_odd_grid_equals_cpu(std::unique_ptr<qk::md::gpu::PmeDevice> device) {
  const qk::md::test::Fixture fx("water_pme");
  const std::vector<Vec3> x = fx.x();
  const Vec3 box{2.5, 2.6, 2.75};
  const std::array<int, 3> grid{25, 24, 27};
  qk::md::Pme cpu(box, grid, 5, 3.0, 1.0), dev(box, grid, 5, 3.0, 1.0);
  dev.set_device(std::move(device));
  for (const Vec3& b : {box, Vec3{2.55, 2.62, 2.8}}) {
    cpu.set_box(b);
    dev.set_box(b);
    std::vector<Vec3> fc(x.size(), Vec3{0, 0, 0}), fd = fc;
    qk::md::Mat3 vc{}, vd{};
    const double ec = cpu.compute(x, fx.top.charge, &fc, &vc), ed = dev.compute(x, fx.top.charge, &fd, &vd);
    EXPECT_NEAR(ed, ec, 1e-5 * std::abs(ec)) << b[0];
    const double scale = max_norm(fc);
    for (size_t a = 0; a < x.size(); ++a)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(fd[a][c], fc[a][c], 1e-4 * scale) << a << " " << c;
    double vs = 0;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) vs = std::max(vs, std::abs(vc[r][c]));
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(vd[r][c], vc[r][c], 1e-4 * vs) << r << c;
  }
}

TEST(PmeGpu, EmulatedKernelsEqualTheCpuPme) {
  expect_pme_device_equals_cpu(qk::md::gpu::host_pme_device());
  expect_odd_grid_equals_cpu(qk::md::gpu::host_pme_device());
}

TEST(PmeGpu, OnTheGpuEqualsTheCpuPme) {
  std::string why;
  if (!qk::md::gpu::cuda_nb_available(&why)) GTEST_SKIP() << why;
  expect_pme_device_equals_cpu(qk::md::gpu::cuda_pme_device());
  expect_odd_grid_equals_cpu(qk::md::gpu::cuda_pme_device());
}

// Both offloads at once through ForceCalculator, and an MD run on them that follows the CPU run.
TEST(PmeGpu, ForcesAndMdWithBothOffloadsFollowTheCpu) {
  const qk::md::test::Fixture fx("water_pme");
  const std::vector<Vec3> x = fx.x();
  qk::md::ForceCalculator cpu(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
  qk::md::ForceCalculator dev(fx.top, fx.mdp, fx.conf.box, qk::md::Precision::kMixed);
  dev.set_nonbonded_device(MdDevice::kGpuEmulated);
  dev.set_pme_device(MdDevice::kGpuEmulated);
  EXPECT_NE(dev.pme_device_name(), "cpu");
  std::vector<Vec3> fc, fd;
  const qk::md::PotentialTerms ec = cpu.compute(x, &fc), ed = dev.compute(x, &fd);
  EXPECT_NEAR(ed.coul_recip, ec.coul_recip, 1e-5 * std::abs(ec.coul_recip));
  EXPECT_NEAR(ed.potential(), ec.potential(), 1e-5 * std::abs(ec.potential()));
  const double scale = max_norm(fc);
  for (size_t a = 0; a < x.size(); ++a)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(fd[a][c], fc[a][c], 1e-4 * scale) << a;
  qk::md::MdpOptions mdp = fx.mdp;
  mdp.nsteps = 20;
  mdp.nstenergy = 10;
  qk::md::RunOptions on_cpu, on_dev;
  on_dev.nonbonded = on_dev.pme = MdDevice::kGpuEmulated;
  const qk::md::RunResult a = qk::md::run(fx.top, mdp, fx.conf, on_cpu), b = qk::md::run(fx.top, mdp, fx.conf, on_dev);
  ASSERT_EQ(a.frames.size(), b.frames.size());
  for (size_t k = 0; k < a.frames.size(); ++k) {
    const double pa = a.frames[k].potential.potential(), pb = b.frames[k].potential.potential();
    EXPECT_NEAR(pb, pa, 1e-5 * std::abs(pa)) << "step " << a.frames[k].step;
  }
}

TEST(PmeGpu, RefusesWhatItCannotDo) {
  const qk::md::test::Fixture pme("water_pme"), rf("water_rf");
  qk::md::ForceCalculator dbl(pme.top, pme.mdp, pme.conf.box, qk::md::Precision::kDouble);
  EXPECT_THROW(dbl.set_pme_device(MdDevice::kGpuEmulated), qk::ValueError);  // single precision only
  qk::md::ForceCalculator no_pme(rf.top, rf.mdp, rf.conf.box, qk::md::Precision::kMixed);
  EXPECT_THROW(no_pme.set_pme_device(MdDevice::kGpuEmulated), qk::ValueError);  // reaction field: no PME
  EXPECT_EQ(no_pme.pme_device_name(), "none");
  qk::md::ForceCalculator shared(pme.top, pme.mdp, pme.conf.box, qk::md::Precision::kMixed);
  qk::md::ForceShare two;
  two.size = 2;
  two.allreduce_sum = [](double*, int64_t) {};
  shared.set_share(two);
  EXPECT_THROW(shared.set_pme_device(MdDevice::kGpuEmulated), qk::ValueError);  // one rank only
}

}  // namespace

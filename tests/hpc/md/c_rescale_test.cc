// The C-rescale barostat (c_rescale.h): its factor (the deterministic part, the noise's size, a draw that
// depends only on the seed and the step), and runs: an expanded water box shrinks toward ref-p, the box
// and positions scale together, a resumed run goes on with the box it had, the mdp's edge checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "c_rescale.h"
#include "md_checkpoint.h"
#include "qk/base/error.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/units.h"
#include "reference_energies.h"

namespace {

namespace fs = std::filesystem;
using qk::md::test::Fixture;

qk::md::MdpOptions npt(const qk::md::MdpOptions& base) {
  qk::md::MdpOptions mdp = base;
  mdp.tcoupl = qk::md::Thermostat::kVRescale;
  mdp.ref_t = {300};
  mdp.tau_t = {0.1};
  mdp.gen_vel = true;
  mdp.gen_temp = 300;
  mdp.gen_seed = 4;
  mdp.pcoupl = qk::md::Barostat::kCRescale;
  mdp.tau_p = 0.5;
  mdp.compressibility = 4.5e-5;
  mdp.ref_p = 1;
  mdp.nstpcouple = 10;
  mdp.ld_seed = 9;
  mdp.nstenergy = 10;
  return mdp;
}

TEST(CRescale, FactorIsGromacssDeterministicPartPlusItsNoise) {
  qk::md::MdpOptions mdp;
  mdp.compressibility = 4.5e-5;
  mdp.tau_p = 2;
  mdp.ref_p = 1;
  const double dt = 0.02, volume = 27, factor = 4.5e-5 * dt / 2;
  // Without noise (kT 0): exp(-beta dt / tau_p (P_ref - P) / 3); a pressure above the reference expands.
  EXPECT_DOUBLE_EQ(qk::md::c_rescale_factor(mdp, dt, 501, volume, 0, 1, 7), std::exp(factor * 500 / 3));
  EXPECT_GT(qk::md::c_rescale_factor(mdp, dt, 501, volume, 0, 1, 7), 1.0);
  EXPECT_LT(qk::md::c_rescale_factor(mdp, dt, -499, volume, 0, 1, 7), 1.0);
  // The draw: the same for the same seed and step, another for another step.
  const double kt = 300 * qk::md::units::kBoltz;
  EXPECT_EQ(qk::md::c_rescale_factor(mdp, dt, 1, volume, kt, 5, 40), qk::md::c_rescale_factor(mdp, dt, 1, volume, kt, 5, 40));
  EXPECT_NE(qk::md::c_rescale_factor(mdp, dt, 1, volume, kt, 5, 40), qk::md::c_rescale_factor(mdp, dt, 1, volume, kt, 5, 50));
  // At the reference pressure log(mu) is the noise alone: mean 0, variance 2 kT beta dt PRESFAC / (V tau_p) / 9.
  const int n = 20000;
  double sum = 0, sum2 = 0;
  for (int s = 0; s < n; ++s) {
    const double l = std::log(qk::md::c_rescale_factor(mdp, dt, 1, volume, kt, 5, s));
    sum += l;
    sum2 += l * l;
  }
  const double want_var = 2 * kt * factor * qk::md::units::kPresFac / volume / 9;
  EXPECT_NEAR(sum / n, 0, 5 * std::sqrt(want_var / n));
  EXPECT_NEAR(sum2 / n / want_var, 1, 0.05);
}

// The PME water expanded by 4% (about -0.1 of its density, a strongly negative pressure) shrinks under
// C-rescale; positions scale with the box (the final .gro's atoms stay inside the final box's images).
TEST(CRescale, AnExpandedBoxShrinksTowardTheReferencePressure) {
  Fixture fx("water_pme");
  qk::md::GroFile conf = fx.conf;
  for (auto& a : conf.atoms)
    for (int d = 0; d < 3; ++d) a.x[d] *= 1.04;
  for (int d = 0; d < 3; ++d) conf.box[d] *= 1.04;
  qk::md::MdpOptions mdp = npt(fx.mdp);
  qk::md::RunOptions opt;
  opt.nsteps = 300;
  const qk::md::RunResult r = qk::md::run(fx.top, mdp, conf, opt);
  ASSERT_GE(r.frames.size(), 30u);
  const double v0 = r.frames.front().box[0] * r.frames.front().box[1] * r.frames.front().box[2];
  const double v1 = r.frames.back().box[0] * r.frames.back().box[1] * r.frames.back().box[2];
  EXPECT_NEAR(v0, 2.6 * 2.6 * 2.6, 0.01);
  EXPECT_LT(r.frames.front().pressure, -500);
  EXPECT_LT(v1, 0.99 * v0) << "the box did not shrink";
  EXPECT_EQ(r.final_conf.box, r.frames.back().box);
  // Isotropic: the three sides stay equal.
  EXPECT_NEAR(r.frames.back().box[0], r.frames.back().box[2], 1e-12);
}

// Stopped at a checkpoint and resumed, the run goes on in the box it had reached.
TEST(CRescale, AResumedRunGoesOnInItsBox) {
  Fixture fx("water_pme");
  const fs::path dir = fs::temp_directory_path() / ("qk_crescale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const qk::md::MdpOptions mdp = npt(fx.mdp);
  qk::md::RunOptions whole_opt;
  whole_opt.nsteps = 40;
  const qk::md::RunResult whole = qk::md::run(fx.top, mdp, fx.conf, whole_opt);
  qk::md::RunOptions first;
  first.nsteps = 25;
  first.checkpoint_dir = (dir / "c.cpt").string();
  first.checkpoint_every_steps = 25;
  qk::md::run(fx.top, mdp, fx.conf, first);
  qk::md::RunOptions rest;
  rest.nsteps = 40;
  rest.resume_from = first.checkpoint_dir;
  const qk::md::RunResult second = qk::md::run(fx.top, mdp, fx.conf, rest);
  ASSERT_FALSE(second.frames.empty());
  const qk::md::EnergyFrame& a = whole.frames.back();
  const qk::md::EnergyFrame& b = second.frames.back();
  ASSERT_EQ(a.step, b.step);
  EXPECT_NE(a.box, fx.conf.box);
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(b.box[d], a.box[d], 1e-6);  // rounding: the list is rebuilt
  EXPECT_NEAR(b.potential.potential(), a.potential.potential(), 1e-6 * std::abs(a.potential.potential()));
  EXPECT_NEAR(b.conserved, a.conserved, 1e-6 * std::abs(a.conserved));
  fs::remove_all(dir);
}

TEST(CRescale, MdpEdgesAreChecked) {
  auto error_of = [](const std::string& text) {
    try {
      qk::md::parse_mdp(text, "p.mdp");
    } catch (const qk::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string base = "tcoupl = V-rescale\ntau-t = 0.1\nref-t = 300\npcoupl = C-rescale\n";
  EXPECT_NE(error_of(base).find("needs compressibility"), std::string::npos);
  EXPECT_NE(error_of("pcoupl = C-rescale\ncompressibility = 4.5e-5\nref-p = 1\n").find("needs temperature coupling"),
            std::string::npos);
  EXPECT_NE(error_of("pcoupl = Parrinello-Rahman\n").find("C-rescale"), std::string::npos);
  EXPECT_NE(error_of(base + "compressibility = 4.5e-5\nref-p = 1\npcoupltype = semiisotropic\n").find("isotropic"),
            std::string::npos);
  const qk::md::MdpOptions o = qk::md::parse_mdp(base + "compressibility = 4.5e-5\nref-p = 1.5\ntau-p = 3\n", "p.mdp");
  EXPECT_EQ(o.pcoupl, qk::md::Barostat::kCRescale);
  EXPECT_DOUBLE_EQ(o.ref_p, 1.5);
  EXPECT_DOUBLE_EQ(o.tau_p, 3);
  // A minimization keeps the box, as grompp.
  EXPECT_EQ(qk::md::parse_mdp("integrator = steep\n" + base + "compressibility = 4.5e-5\nref-p = 1\n", "p.mdp").pcoupl,
            qk::md::Barostat::kNo);
}

}  // namespace

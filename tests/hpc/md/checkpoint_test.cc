// qk md's checkpoints: a run stopped at a checkpoint and resumed equals the run that never stopped (the
// V-rescale generator, the half-step kinetic energy and the trajectories carried over; the pair list is
// rebuilt, so forces are summed in another order and the runs agree to rounding, not bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <unistd.h>

#include "md_checkpoint.h"
#include "qk/base/checkpoint_dir.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/md/output_file.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/trr.h"
#include "qk/hpc/md/xtc.h"

namespace fs = std::filesystem;

namespace {

const std::string kWater = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/water_pme/";

// The PME water with a thermostat, generated velocities and both trajectories.
qk::md::MdpOptions thermostatted_water() {
  qk::md::MdpOptions mdp = qk::md::read_mdp(kWater + "run.mdp");
  mdp.tcoupl = qk::md::Thermostat::kVRescale;
  mdp.tau_t = {0.1};
  mdp.ref_t = {300};
  mdp.nsttcouple = 1;  // a draw every step: a generator not carried over shows at once
  mdp.gen_vel = true;
  mdp.gen_temp = 300;
  mdp.gen_seed = 11;
  mdp.nstenergy = 2;
  mdp.nstxout = 2;
  mdp.nstvout = 4;
  mdp.nstxout_compressed = 1;
  return mdp;
}

TEST(MdCheckpoint, ResumedRunEqualsTheRunThatNeverStopped) {
  const fs::path dir = fs::temp_directory_path() / ("qk_md_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const qk::md::MdpOptions mdp = thermostatted_water();
  const qk::md::Topology top = qk::md::read_top(kWater + "topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(kWater + "conf.gro");
  auto options = [&](const std::string& name, int64_t nsteps) {
    qk::md::RunOptions o;
    o.nsteps = nsteps;
    o.trajectory = (dir / (name + ".trr")).string();
    o.compressed_trajectory = (dir / (name + ".xtc")).string();
    return o;
  };
  const qk::md::RunResult whole = qk::md::run(top, mdp, conf, options("a", 20));

  qk::md::RunOptions first = options("b", 11);  // stops after step 11; checkpoints at 4, 8 and 11
  first.checkpoint_dir = (dir / "b.cpt").string();
  first.checkpoint_every_steps = 4;
  qk::md::run(top, mdp, conf, first);
  const std::optional<qk::md::MdCheckpoint> c = qk::md::latest_md_checkpoint(first.checkpoint_dir);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 11);
  EXPECT_EQ(c->thermostats.size(), 1u);
  EXPECT_EQ(qk::CheckpointDir(first.checkpoint_dir).list().size(), 2u);  // the newest two: 8 and 11

  qk::md::RunOptions rest = options("b", 20);
  rest.resume_from = first.checkpoint_dir;
  const qk::md::RunResult second = qk::md::run(top, mdp, conf, rest);
  EXPECT_EQ(second.first_step, 11);

  // Energies of the steps both report (12 .. 20, every 2nd, and the last).
  ASSERT_FALSE(second.frames.empty());
  for (const qk::md::EnergyFrame& e : second.frames) {
    const auto w = std::find_if(whole.frames.begin(), whole.frames.end(),
                                [&](const qk::md::EnergyFrame& f) { return f.step == e.step; });
    ASSERT_NE(w, whole.frames.end()) << "step " << e.step;
    EXPECT_NEAR(e.potential.potential(), w->potential.potential(), 1e-6 * std::abs(w->potential.potential()))
        << "step " << e.step;
    EXPECT_NEAR(e.kinetic, w->kinetic, 1e-6 * w->kinetic) << "step " << e.step;
    EXPECT_NEAR(e.conserved, w->conserved, 1e-6 * std::abs(w->conserved)) << "step " << e.step;
  }
  // The trajectories: every frame once, in order, as the run that never stopped wrote them.
  const std::vector<qk::md::TrrFrame> ta = qk::md::read_trr((dir / "a.trr").string()),
                                      tb = qk::md::read_trr((dir / "b.trr").string());
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t k = 0; k < ta.size(); ++k) {
    ASSERT_EQ(ta[k].step, tb[k].step);
    ASSERT_EQ(ta[k].v.size(), tb[k].v.size());
    for (size_t i = 0; i < ta[k].x.size(); ++i)
      for (int d = 0; d < 3; ++d) ASSERT_NEAR(ta[k].x[i][d], tb[k].x[i][d], 1e-6) << "step " << ta[k].step;
  }
  const std::vector<qk::md::XtcFrame> xa = qk::md::read_xtc((dir / "a.xtc").string()),
                                      xb = qk::md::read_xtc((dir / "b.xtc").string());
  ASSERT_EQ(xa.size(), 21u);
  ASSERT_EQ(xb.size(), xa.size());
  for (size_t k = 0; k < xa.size(); ++k) EXPECT_EQ(xb[k].step, static_cast<int64_t>(k));
  fs::remove_all(dir);
}

TEST(MdCheckpoint, MismatchedResumesAreRefused) {
  const fs::path dir = fs::temp_directory_path() / ("qk_md_ckpt_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const qk::md::MdpOptions mdp = thermostatted_water();
  const qk::md::Topology top = qk::md::read_top(kWater + "topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(kWater + "conf.gro");
  qk::md::RunOptions o;
  o.nsteps = 3;
  o.checkpoint_dir = (dir / "c.cpt").string();
  qk::md::run(top, mdp, conf, o);
  // Past the end, without the thermostat it was written with, or with a trajectory cut shorter.
  qk::md::RunOptions r;
  r.resume_from = o.checkpoint_dir;
  r.nsteps = 2;
  EXPECT_THROW(qk::md::run(top, mdp, conf, r), qk::Error);
  qk::md::MdpOptions no_thermostat = mdp;
  no_thermostat.tcoupl = qk::md::Thermostat::kNo;
  r.nsteps = 6;
  EXPECT_THROW(qk::md::run(top, no_thermostat, conf, r), qk::Error);
  // No checkpoint in the folder: a fresh start.
  r.resume_from = (dir / "empty").string();
  EXPECT_EQ(qk::md::run(top, mdp, conf, r).first_step, 0);
  // A fresh run into a folder holding another run's checkpoints replaces them: resuming later must not go
  // on from the other run's step 3.
  qk::md::RunOptions fresh;
  fresh.nsteps = 2;
  fresh.checkpoint_dir = o.checkpoint_dir;
  qk::md::run(top, mdp, conf, fresh);
  const std::optional<qk::md::MdCheckpoint> now = qk::md::latest_md_checkpoint(o.checkpoint_dir);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->step, 2);
  fs::remove_all(dir);
}

// What resuming does to an output: cut back to the checkpoint's size and appended to; a file missing or
// shorter than the checkpoint says is refused (naming it), never silently restarted.
TEST(MdCheckpoint, OutputsAreCutBackAndAppendedOrRefused) {
  const fs::path path = fs::temp_directory_path() / ("qk_md_out_" + std::to_string(::getpid()) + ".bin");
  {
    qk::md::OutputFile f(path.string(), std::nullopt);
    f.write("frame1frame2partial");
  }
  {
    qk::md::OutputFile f(path.string(), 12);
    EXPECT_EQ(f.bytes(), 12u);
    f.write("frame3");
  }
  EXPECT_EQ(qk::read_file(path.string()), "frame1frame2frame3");
  EXPECT_THROW(qk::md::OutputFile(path.string(), 100), qk::Error);
  fs::remove(path);
  EXPECT_THROW(qk::md::OutputFile(path.string(), 0), qk::Error);
}

}  // namespace

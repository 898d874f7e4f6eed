// The .trr trajectory: GROMACS's own file (tests/fixtures/md/argon/traj_reference.trr, written by
// mixed-precision gmx mdrun through tests/fixtures/gen_md.sh) read, written back byte for byte, and
// qk md's run of the same mdp compared with it frame by frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/trr.h"

namespace fs = std::filesystem;

namespace {

const std::string kArgon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon";

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("qk_trr_" + std::to_string(::getpid()) + "_" + name);
}

TEST(Trr, ReadsGromacsFileAndWritesItBackByteForByte) {
  const std::vector<qk::md::TrrFrame> frames = qk::md::read_trr(kArgon + "/traj_reference.trr");
  ASSERT_EQ(frames.size(), 3u);  // steps 0, 1, 2: x every step, v and f every second
  for (int k = 0; k < 3; ++k) {
    const qk::md::TrrFrame& fr = frames[k];
    EXPECT_EQ(fr.step, k);
    EXPECT_NEAR(fr.time, 0.002 * k, 1e-7);
    EXPECT_EQ(fr.natoms, 500);
    EXPECT_FALSE(fr.double_precision);
    EXPECT_EQ(fr.x.size(), 500u);
    EXPECT_EQ(fr.v.size(), k == 1 ? 0u : 500u);
    EXPECT_EQ(fr.f.size(), k == 1 ? 0u : 500u);
    EXPECT_NEAR(fr.box[0][0], 2.86, 1e-6);
    EXPECT_EQ(fr.box[0][1], 0.0);
  }
  const fs::path out = temp_file("copy.trr");
  {
    qk::md::TrrWriter w(out.string(), /*double_precision=*/false);
    for (const qk::md::TrrFrame& fr : frames) w.write(fr);
  }
  const std::string ours = qk::read_file(out.string()), theirs = qk::read_file(kArgon + "/traj_reference.trr");
  EXPECT_EQ(ours.size(), theirs.size());
  EXPECT_TRUE(ours == theirs) << "first difference at byte "
                              << std::mismatch(ours.begin(), ours.end(), theirs.begin(), theirs.end()).first -
                                     ours.begin();
  fs::remove(out);
}

TEST(Trr, DoublePrecisionFramesRoundTripExactly) {
  qk::md::TrrFrame fr;
  fr.step = 123456;
  fr.time = 246.912;
  fr.box = {qk::md::Vec3{3.1, 0, 0}, qk::md::Vec3{0, 3.2, 0}, qk::md::Vec3{0, 0, 3.3}};
  fr.x = {{0.1, 0.2, 0.3}, {1.0 / 3, 2.0 / 3, 1e-300}};
  fr.f = {{-1e5, 2.5, 0}, {1, -2, 3}};  // no velocities in this frame
  const fs::path out = temp_file("double.trr");
  {
    qk::md::TrrWriter w(out.string(), /*double_precision=*/true);
    w.write(fr);
    fr.step += 1;
    fr.v = fr.x;
    w.write(fr);
  }
  const std::vector<qk::md::TrrFrame> back = qk::md::read_trr(out.string());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(back[0].double_precision);
  EXPECT_EQ(back[0].step, 123456);
  EXPECT_EQ(back[0].time, fr.time);
  EXPECT_EQ(back[0].box, fr.box);
  EXPECT_EQ(back[0].x, fr.x);
  EXPECT_TRUE(back[0].v.empty());
  EXPECT_EQ(back[0].f, fr.f);
  EXPECT_EQ(back[1].v, fr.x);
  fs::remove(out);
}

TEST(Trr, CutShortFilesKeepTheirWholeFramesForeignOnesAreRefused) {
  const std::string theirs = qk::read_file(kArgon + "/traj_reference.trr");
  const fs::path cut = temp_file("cut.trr");
  // A run killed while writing its last frame: the whole frames before it are read (a warning says so).
  qk::atomic_write_file(cut.string(), theirs.substr(0, theirs.size() - 10));
  const std::vector<qk::md::TrrFrame> whole = qk::md::read_trr(cut.string());
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[1].step, 1);
  qk::atomic_write_file(cut.string(), "not a trajectory at all");
  try {
    qk::md::read_trr(cut.string());
    FAIL() << "a text file was read as a .trr";
  } catch (const qk::Error& e) {
    EXPECT_NE(e.message().find("frame 0 at byte 0"), std::string::npos) << e.message();
  }
  fs::remove(cut);
}

// qk md's 2-step argon run with the same mdp writes the frames gmx mdrun wrote, with the same contents:
// x(t), v(t - dt/2) and f(t) per step, within float rounding and the two engines' float force sums.
TEST(Trr, MdRunWritesTheFramesGromacsWrites) {
  const qk::md::MdpOptions mdp = qk::md::read_mdp(kArgon + "/traj.mdp");
  const qk::md::Topology top = qk::md::read_top(kArgon + "/topol.top");
  const qk::md::GroFile conf = qk::md::read_gro(kArgon + "/conf.gro");
  const fs::path out = temp_file("run.trr");
  qk::md::RunOptions opt;
  opt.trajectory = out.string();
  qk::md::run(top, mdp, conf, opt);
  const std::vector<qk::md::TrrFrame> ours = qk::md::read_trr(out.string());
  const std::vector<qk::md::TrrFrame> ref = qk::md::read_trr(kArgon + "/traj_reference.trr");
  ASSERT_EQ(ours.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    SCOPED_TRACE("frame " + std::to_string(k));
    EXPECT_EQ(ours[k].step, ref[k].step);
    EXPECT_NEAR(ours[k].time, ref[k].time, 1e-7);
    EXPECT_FALSE(ours[k].double_precision);  // mixed precision, as gmx
    EXPECT_EQ(ours[k].box, ref[k].box);
    ASSERT_EQ(ours[k].x.size(), ref[k].x.size());
    ASSERT_EQ(ours[k].v.size(), ref[k].v.size());
    ASSERT_EQ(ours[k].f.size(), ref[k].f.size());
    double fmax = 0, vmax = 0;
    for (size_t i = 0; i < ref[k].f.size(); ++i)
      for (int d = 0; d < 3; ++d) {
        fmax = std::max(fmax, std::abs(ref[k].f[i][d]));
        vmax = std::max(vmax, std::abs(ref[k].v[i][d]));
      }
    for (size_t i = 0; i < ref[k].x.size(); ++i)
      for (int d = 0; d < 3; ++d) {
        // GROMACS puts atoms back in the box at its pair searches; qk md keeps them where they went.
        const double L = ref[k].box[d][d], dx = ours[k].x[i][d] - ref[k].x[i][d];
        ASSERT_NEAR(dx - L * std::round(dx / L), 0.0, 2e-6) << "atom " << i;
        if (!ref[k].v.empty()) {
          ASSERT_NEAR(ours[k].v[i][d], ref[k].v[i][d], 1e-4 * vmax + 1e-9) << "atom " << i;
        }
        if (!ref[k].f.empty()) {
          ASSERT_NEAR(ours[k].f[i][d], ref[k].f[i][d], 1e-4 * fmax) << "atom " << i;
        }
      }
  }
  fs::remove(out);
}

TEST(Trr, NoTrajectoryFileWhenTheMdpAsksForNone) {
  qk::md::MdpOptions mdp = qk::md::read_mdp(kArgon + "/traj.mdp");
  mdp.nstxout = mdp.nstvout = mdp.nstfout = 0;
  const fs::path out = temp_file("none.trr");
  qk::md::RunOptions opt;
  opt.trajectory = out.string();
  opt.nsteps = 1;
  qk::md::run(qk::md::read_top(kArgon + "/topol.top"), mdp, qk::md::read_gro(kArgon + "/conf.gro"), opt);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace

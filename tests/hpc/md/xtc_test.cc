// The .xtc compressed trajectory against GROMACS's own files (tests/fixtures/gen_md.sh): the argon run's
// traj_reference.xtc (gmx mdrun, the same run as traj_reference.trr) and water_pme's conf_reference.xtc
// (gmx trjconv of conf.gro). Our encoder must give their bytes exactly from the same positions, and our
// decoder their positions to the grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/trr.h"
#include "qk/hpc/md/xtc.h"

namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/";

size_t first_difference(const std::string& a, const std::string& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

TEST(Xtc, EncodesGromacsFramesByteForByte) {
  // The argon run: positions from gmx's own .trr of the same run, step by step.
  std::string ours;
  for (const qk::md::TrrFrame& t : qk::md::read_trr(kFixtures + "argon/traj_reference.trr")) {
    qk::md::XtcFrame fr;
    fr.step = t.step;
    fr.time = t.time;
    fr.box = t.box;
    fr.x = t.x;
    ours += qk::md::encode_xtc_frame(fr, 1000);
  }
  const std::string theirs = qk::read_file(kFixtures + "argon/traj_reference.xtc");
  EXPECT_EQ(ours.size(), theirs.size());
  EXPECT_TRUE(ours == theirs) << "first difference at byte " << first_difference(ours, theirs);
  // SPC water (runs and the swapped first atom of each molecule).
  const qk::md::GroFile gro = qk::md::read_gro(kFixtures + "water_pme/conf.gro");
  qk::md::XtcFrame w;
  for (int d = 0; d < 3; ++d) w.box[d][d] = gro.box[d];
  for (const qk::md::GroAtom& a : gro.atoms) w.x.push_back(a.x);
  const std::string water = qk::md::encode_xtc_frame(w, 1000);
  const std::string gmx_water = qk::read_file(kFixtures + "water_pme/conf_reference.xtc");
  EXPECT_EQ(water.size(), gmx_water.size());
  EXPECT_TRUE(water == gmx_water) << "first difference at byte " << first_difference(water, gmx_water);
}

TEST(Xtc, DecodesGromacsFramesToTheGrid) {
  const std::vector<qk::md::XtcFrame> frames = qk::md::read_xtc(kFixtures + "argon/traj_reference.xtc");
  const std::vector<qk::md::TrrFrame> full = qk::md::read_trr(kFixtures + "argon/traj_reference.trr");
  ASSERT_EQ(frames.size(), full.size());
  for (size_t k = 0; k < frames.size(); ++k) {
    EXPECT_EQ(frames[k].step, full[k].step);
    EXPECT_NEAR(frames[k].time, full[k].time, 1e-7);
    EXPECT_EQ(frames[k].precision, 1000.0f);
    EXPECT_EQ(frames[k].box, full[k].box);
    ASSERT_EQ(frames[k].x.size(), full[k].x.size());
    for (size_t i = 0; i < full[k].x.size(); ++i)
      for (int d = 0; d < 3; ++d) ASSERT_NEAR(frames[k].x[i][d], full[k].x[i][d], 0.5e-3 + 1e-6) << "atom " << i;
  }
  const qk::md::GroFile gro = qk::md::read_gro(kFixtures + "water_pme/conf.gro");
  const std::vector<qk::md::XtcFrame> water = qk::md::read_xtc(kFixtures + "water_pme/conf_reference.xtc");
  ASSERT_EQ(water.size(), 1u);
  ASSERT_EQ(water[0].x.size(), gro.atoms.size());
  for (size_t i = 0; i < gro.atoms.size(); ++i)
    for (int d = 0; d < 3; ++d) ASSERT_NEAR(water[0].x[i][d], gro.atoms[i].x[d], 0.5e-3 + 1e-6) << "atom " << i;
}

// Frames of 9 atoms or fewer are plain floats; coordinates spread over more than 2^24 grid points take the
// per-coordinate bit path; a coarser precision rounds coarser.
TEST(Xtc, SmallWideAndCoarseFramesRoundTrip) {
  const fs::path path = fs::temp_directory_path() / ("qk_xtc_" + std::to_string(::getpid()) + ".xtc");
  qk::md::XtcFrame small, wide;
  small.x = {{0.1234567, 1.5, 2.0}, {3.25, -0.5, 0.75}};
  for (int i = 0; i < 40; ++i) wide.x.push_back({i * 900.0 + 0.0123, -i * 0.31, std::sin(i) * 5});
  {
    qk::md::XtcWriter w(path.string());
    w.write(small);
    wide.step = 7;
    w.write(wide);
  }
  const std::vector<qk::md::XtcFrame> back = qk::md::read_xtc(path.string());
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < small.x.size(); ++i)
    for (int d = 0; d < 3; ++d) EXPECT_EQ(back[0].x[i][d], static_cast<float>(small.x[i][d]));
  EXPECT_EQ(back[1].step, 7);
  for (size_t i = 0; i < wide.x.size(); ++i)
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(back[1].x[i][d], wide.x[i][d], 0.5e-3 + 2e-3 * std::abs(wide.x[i][d]) * 1e-3);
  {
    qk::md::XtcWriter coarse(path.string(), 10);  // 0.1 nm
    coarse.write(wide);
  }
  const std::vector<qk::md::XtcFrame> c = qk::md::read_xtc(path.string());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].precision, 10.0f);
  for (size_t i = 0; i < wide.x.size(); ++i)
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(c[0].x[i][d], wide.x[i][d], 0.05 + 1e-3);
  // Cut inside the second frame: the first is read; a corrupt magic number is refused.
  const std::string ref = qk::read_file(kFixtures + "argon/traj_reference.xtc");
  const size_t first = qk::md::encode_xtc_frame(qk::md::read_xtc(kFixtures + "argon/traj_reference.xtc")[0], 1000).size();
  qk::atomic_write_file(path.string(), ref.substr(0, first + 100));
  EXPECT_EQ(qk::md::read_xtc(path.string()).size(), 1u);
  std::string corrupt = ref;
  corrupt[first + 3] = 7;
  qk::atomic_write_file(path.string(), corrupt);
  EXPECT_THROW(qk::md::read_xtc(path.string()), qk::Error);
  EXPECT_THROW(qk::md::XtcWriter(path.string(), 0), qk::Error);
  fs::remove(path);
}

// qk md's run of the argon trajectory mdp writes the .xtc frames gmx mdrun wrote: same steps, times and box,
// positions on the same 0.001 nm grid within a grid point (the engines' float forces differ in rounding)
// modulo the box (GROMACS puts atoms back in the box at its pair searches).
TEST(Xtc, MdRunWritesTheFramesGromacsWrites) {
  const std::string argon = kFixtures + "argon/";
  const fs::path path = fs::temp_directory_path() / ("qk_xtc_run_" + std::to_string(::getpid()) + ".xtc");
  qk::md::RunOptions opt;
  opt.compressed_trajectory = path.string();
  qk::md::run(qk::md::read_top(argon + "topol.top"), qk::md::read_mdp(argon + "traj.mdp"),
              qk::md::read_gro(argon + "conf.gro"), opt);
  const std::vector<qk::md::XtcFrame> ours = qk::md::read_xtc(path.string());
  const std::vector<qk::md::XtcFrame> ref = qk::md::read_xtc(argon + "traj_reference.xtc");
  ASSERT_EQ(ours.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    EXPECT_EQ(ours[k].step, ref[k].step);
    EXPECT_EQ(ours[k].time, ref[k].time);
    EXPECT_EQ(ours[k].box, ref[k].box);
    ASSERT_EQ(ours[k].x.size(), ref[k].x.size());
    for (size_t i = 0; i < ref[k].x.size(); ++i)
      for (int d = 0; d < 3; ++d) {
        const double L = ref[k].box[d][d], dx = ours[k].x[i][d] - ref[k].x[i][d];
        ASSERT_NEAR(dx - L * std::round(dx / L), 0.0, 1e-3 + 1e-6) << "frame " << k << " atom " << i;
      }
  }
  fs::remove(path);
}

}  // namespace

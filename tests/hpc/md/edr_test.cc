// The .edr energy file against GROMACS's own (tests/fixtures/md/argon/traj_reference.edr: gmx mdrun's,
// mixed precision, for the 2-step argon run of traj.mdp; gen_md.sh): read, and qk md's run of the same
// mdp writes GROMACS's names with the values its md.log has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/hpc/md/edr.h"
#include "qk/hpc/md/md.h"

namespace fs = std::filesystem;

namespace {

const std::string kArgon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon/";

int term(const qk::md::EdrFile& f, const std::string& name) {
  const auto it = std::find_if(f.terms.begin(), f.terms.end(), [&](const qk::md::EdrTerm& t) { return t.name == name; });
  return it == f.terms.end() ? -1 : static_cast<int>(it - f.terms.begin());
}

TEST(Edr, ReadsGromacsEnergyFile) {
  const qk::md::EdrFile g = qk::md::read_edr(kArgon + "traj_reference.edr");
  EXPECT_FALSE(g.double_precision);
  ASSERT_EQ(g.frames.size(), 3u);  // nstenergy = 1, 2 steps
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(g.frames[k].step, k);
    EXPECT_NEAR(g.frames[k].time, 0.002 * k, 1e-12);
  }
  const int lj = term(g, "LJ (SR)"), temp = term(g, "Temperature"), pres = term(g, "Pressure");
  ASSERT_GE(lj, 0);
  ASSERT_GE(temp, 0);
  ASSERT_GE(pres, 0);
  EXPECT_EQ(g.terms[temp].unit, "K");
  EXPECT_EQ(g.terms[pres].unit, "bar");
  EXPECT_NEAR(g.frames[0].values[lj], -3188.03275, 1e-5 * 3188);  // gmx_d's step-0 value (reference.txt)
}

// qk md's run of the same mdp: every term it writes is one GROMACS writes, under the same name and unit,
// with GROMACS's value (within the two engines' float forces), frame by frame.
TEST(Edr, MdRunWritesGromacsTermsAndValues) {
  const fs::path path = fs::temp_directory_path() / ("qk_edr_" + std::to_string(::getpid()) + ".edr");
  qk::md::RunOptions opt;
  opt.energy_file = path.string();
  const qk::md::RunResult r = qk::md::run(qk::md::read_top(kArgon + "topol.top"), qk::md::read_mdp(kArgon + "traj.mdp"),
                                          qk::md::read_gro(kArgon + "conf.gro"), opt);
  const qk::md::EdrFile ours = qk::md::read_edr(path.string()), g = qk::md::read_edr(kArgon + "traj_reference.edr");
  ASSERT_EQ(ours.frames.size(), g.frames.size());
  ASSERT_EQ(ours.frames.size(), r.frames.size());
  for (const char* name : {"LJ (SR)", "Disper. corr.", "Potential", "Kinetic En.", "Total Energy", "Temperature",
                           "Pressure", "Pres. DC", "Vir-XY", "Pres-XX", "Pres-ZY", "#Surf*SurfTen", "T-rest"})
    EXPECT_GE(term(ours, name), 0) << name;
  // Here (no thermostat, no pressure coupling) the very same terms, in GROMACS's order.
  EXPECT_EQ(ours.terms, g.terms);
  for (size_t t = 0; t < ours.terms.size(); ++t) {
    const int k = term(g, ours.terms[t].name);
    ASSERT_GE(k, 0) << ours.terms[t].name << " is not a GROMACS term";
    EXPECT_EQ(ours.terms[t].unit, g.terms[k].unit) << ours.terms[t].name;
    for (size_t f = 0; f < g.frames.size(); ++f) {
      const double a = ours.frames[f].values[t], b = g.frames[f].values[k];
      // Pressures are differences of large terms (and the kinetic energy of near-still atoms is tiny): an
      // absolute allowance; energies and geometry relative.
      // (#Surf*SurfTen is a pressure times the box height; the virial of near-still atoms tiny too.)
      const bool pressure = ours.terms[t].unit == "bar" || ours.terms[t].unit == "bar nm";
      const bool virial = ours.terms[t].name.rfind("Vir-", 0) == 0;
      EXPECT_NEAR(a, b, pressure ? 0.2 : virial ? 1e-3 * std::abs(b) + 0.01 : 1e-4 * std::abs(b) + 1e-6)
          << ours.terms[t].name << " at step " << g.frames[f].step;
    }
  }
  // And md.log's numbers are the .edr's.
  const int pot = term(ours, "Potential");
  for (size_t f = 0; f < r.frames.size(); ++f)
    EXPECT_NEAR(ours.frames[f].values[pot], r.frames[f].potential.potential(), 1e-3);
  fs::remove(path);
}

qk::md::EdrFrame frame(int64_t step, double time, std::vector<double> values) {
  qk::md::EdrFrame f;
  f.step = step;
  f.time = time;
  f.dt = 0.002;
  f.nsteps = 1;
  f.values = std::move(values);
  return f;
}

// GROMACS's running sums: the sum and the squared deviations of the steps since the last frame, a sum of
// one step not stored, and the whole run's sums kept across frames.
TEST(Edr, RunningSumsAreGromacssAndRoundTrip) {
  qk::md::EdrSums sums;
  sums.add({1.0, 10.0});
  qk::md::EdrFrame first = frame(0, 0, {1.0, 10.0});
  sums.take(&first);
  EXPECT_EQ(first.nsum, 1);
  for (double v : {2.0, 4.0, 9.0}) sums.add({v, 10 * v});
  qk::md::EdrFrame second = frame(3, 0.006, {9.0, 90.0});
  sums.take(&second);
  ASSERT_EQ(second.nsum, 3);
  EXPECT_DOUBLE_EQ(second.esum[0], 15.0);
  EXPECT_DOUBLE_EQ(second.eav[0], 26.0);  // (2-5)^2 + (4-5)^2 + (9-5)^2
  EXPECT_DOUBLE_EQ(second.eav[1], 2600.0);
  EXPECT_EQ(sums.nsum_run, 4);
  EXPECT_DOUBLE_EQ(sums.esum_run[0], 16.0);
  const fs::path path = fs::temp_directory_path() / ("qk_edr_s_" + std::to_string(::getpid()) + ".edr");
  {
    qk::md::EdrWriter w(path.string(), {{"A", "kJ/mol"}, {"B", "K"}}, /*double_precision=*/true);
    w.write(first);
    w.write(second);
  }
  const qk::md::EdrFile f = qk::md::read_edr(path.string());
  ASSERT_EQ(f.frames.size(), 2u);
  EXPECT_EQ(f.frames[0].nsum, 0) << "a sum of one step is not stored (GROMACS's enxio)";
  EXPECT_TRUE(f.frames[0].esum.empty());
  EXPECT_EQ(f.frames[1].nsum, 3);
  EXPECT_EQ(f.frames[1].esum, second.esum);
  EXPECT_EQ(f.frames[1].eav, second.eav);
  fs::remove(path);
}

TEST(Edr, DoublePrecisionRoundTripAndBadFiles) {
  const fs::path path = fs::temp_directory_path() / ("qk_edr_d_" + std::to_string(::getpid()) + ".edr");
  {
    qk::md::EdrWriter w(path.string(), {{"Potential", "kJ/mol"}, {"Temperature", "K"}}, /*double_precision=*/true);
    w.write(frame(7, 0.014, {-1234.5678901234, 300.000000001}));
    w.write(frame(8, 0.016, {-1234.0, 299.5}));
  }
  const qk::md::EdrFile f = qk::md::read_edr(path.string());
  EXPECT_TRUE(f.double_precision);
  ASSERT_EQ(f.frames.size(), 2u);
  EXPECT_EQ(f.frames[0].values[0], -1234.5678901234);
  EXPECT_EQ(f.frames[0].values[1], 300.000000001);
  EXPECT_EQ(f.frames[1].step, 8);
  EXPECT_THROW(qk::md::EdrWriter(path.string(), {{"A", "kJ/mol"}}, false).write(frame(0, 0, {1, 2})), qk::Error);
  const std::string g = qk::read_file(kArgon + "traj_reference.edr");
  qk::atomic_write_file(path.string(), g.substr(0, g.size() - 7));  // the last frame cut short: dropped
  EXPECT_EQ(qk::md::read_edr(path.string()).frames.size(), 2u);
  qk::atomic_write_file(path.string(), "not an energy file");
  EXPECT_THROW(qk::md::read_edr(path.string()), qk::Error);
  fs::remove(path);
}

}  // namespace

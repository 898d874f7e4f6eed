// `qk md` end to end on the water box with PME that tests/hpc/md checks
// against GROMACS: md.log's step-0 energies (GROMACS's Potential), the final
// .gro and the Performance line; the .trr of a trajectory mdp; -h; bad input named.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_qk.h"
#include "common/scratch_dir.h"
#include "qk/base/file_io.h"

namespace {

using qk::test::run_qk;

const qk::test::ScratchRoot kScratch("md");

const std::string kWater = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/water_pme/";

TEST(CliMd, WaterBoxWritesGromacsLogAndFinalCoordinates) {
  const std::string dir = kScratch.fresh("water");
  const auto r = run_qk("md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater +
                        "topol.top -deffnm " + dir + "/w -nsteps 5 -nt 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/w.log")) << r.output;
  const std::string log = qk::read_file(dir + "/w.log");
  EXPECT_NE(log.find("Potential"), std::string::npos) << log;
  EXPECT_NE(log.find("-1.98330e+04"), std::string::npos) << "GROMACS's step-0 Potential\n" << log;
  EXPECT_NE(log.find("Performance:"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(dir + "/w.gro")) << r.output;
}

// The numbers (d.ddddde+dd) of the last energy block before the averages.
std::vector<double> last_energies(const std::string& log) {
  const size_t end = log.find("A V E R A G E S");
  const size_t at = log.rfind("   Energies (kJ/mol)", end);
  std::vector<double> v;
  if (at == std::string::npos) return v;
  const std::string block = log.substr(at, log.find("\n\n", at) - at);
  const std::regex number(R"(-?\d\.\d+e[+-]\d+)");
  for (auto it = std::sregex_iterator(block.begin(), block.end(), number); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod(it->str()));
  return v;
}

// `qk run --nproc-per-node 2 -- qk md`: the forces shared out over two
// processes (md::ForceShare) run the one-process run, energies equal to the
// log's digits after 20 steps; the first rank alone writes and prints.
TEST(CliMd, TwoRanksRunTheOneRankRun) {
  const std::string dir = kScratch.fresh("ranks");
  const std::string inputs = " md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater +
                             "topol.top -nsteps 20 -nt 1 -deffnm " + dir;
  const auto one = run_qk(inputs + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + inputs + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("1 threads on each of 2 ranks"), std::string::npos) << two.output;
  // Two 1.25 nm slabs are too thin for the 1 nm cut-off: the forces are shared out instead, and it says why.
  EXPECT_NE(two.output.find("force decomposition (every rank holds every atom): 2 slabs of a 2.500 nm box"),
            std::string::npos)
      << two.output;
  EXPECT_EQ(two.output.find("[rank1]: qk md"), std::string::npos) << "the second rank printed\n" << two.output;
  // mdrun's Time line: core time and (%) count both ranks' threads.
  EXPECT_TRUE(std::regex_search(two.output, std::regex(R"(Time: +[0-9.]+ +[0-9.]+ +200\.0\n)"))) << two.output;
  const std::vector<double> a = last_energies(qk::read_file(dir + "/one.log"));
  const std::vector<double> b = last_energies(qk::read_file(dir + "/two.log"));
  ASSERT_GE(a.size(), 8u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-5 * std::abs(a[i])) << "term " << i;
  for (const char* f : {"/two.gro", "/two.edr"}) EXPECT_TRUE(std::filesystem::exists(dir + f)) << f;
}

// Argon twice over along x (5.72 x 2.86 x 2.86 nm, 1,000 atoms): wide enough for two slabs; with `cube`,
// twice along y and z too (4,000 atoms) and a 1.45 nm cut-off, under which four 1.43 nm slabs are too thin
// and a 2 x 2 grid is not. Writes conf.gro, topol.top and an MD mdp (20 steps from generated velocities,
// compressed positions every 10) into `dir`.
void write_long_argon(const std::string& dir, bool cube = false) {
  const std::string argon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon/";
  std::istringstream in(qk::read_file(argon + "conf.gro"));
  std::string title, count, line;
  std::getline(in, title);
  std::getline(in, count);
  std::vector<std::array<double, 3>> x;
  while (std::getline(in, line) && line.size() >= 44 && x.size() < 500)
    x.push_back({std::stod(line.substr(20, 8)), std::stod(line.substr(28, 8)), std::stod(line.substr(36, 8))});
  ASSERT_EQ(x.size(), 500u);
  const int copies = cube ? 8 : 2;
  std::ofstream gro(dir + "/conf.gro");
  gro << "Liquid argon, " << copies << " copies\n " << 500 * copies << "\n";
  char buf[128];
  for (int copy = 0; copy < copies; ++copy)
    for (size_t i = 0; i < x.size(); ++i) {
      const int n = static_cast<int>(copy * 500 + i + 1);
      std::snprintf(buf, sizeof buf, "%5d%-5s%5s%5d%8.3f%8.3f%8.3f\n", n % 100000, "AR", "AR", n % 100000,
                    x[i][0] + 2.86 * (copy % 2), x[i][1] + 2.86 * (copy / 2 % 2), x[i][2] + 2.86 * (copy / 4));
      gro << buf;
    }
  gro << (cube ? "   5.72000   5.72000   5.72000\n" : "   5.72000   2.86000   2.86000\n");
  std::string top = qk::read_file(argon + "topol.top");
  const size_t at = top.find("AR 500");
  ASSERT_NE(at, std::string::npos);
  top.replace(at, 6, "AR " + std::to_string(500 * copies));
  std::ofstream(dir + "/topol.top") << top;
  std::ofstream(dir + "/run.mdp") << "integrator = md\ndt = 0.002\nnsteps = 20\ncutoff-scheme = Verlet\n"
                                     "nstlist = 10\ncoulombtype = Reaction-Field\n"
                                  << (cube ? "rcoulomb = 1.45\nrvdw = 1.45\n" : "rcoulomb = 1.0\nrvdw = 1.0\n")
                                  << "DispCorr = EnerPres\ntcoupl = V-rescale\ntc-grps = System\ntau_t = 0.5\n"
                                     "ref_t = 120\ngen_vel = yes\ngen_temp = 120\ngen_seed = 5\nnstenergy = 10\n"
                                     "nstcalcenergy = 10\nnstxout-compressed = 10\n";
}

// `qk run --nproc-per-node 2 -- qk md -decomp domains`: two processes, each integrating its slab's atoms
// with a halo from the other, run the one-process run (energies to the log's digits after 20 steps); the
// first rank writes the log, the compressed trajectory and the checkpoint, gathered from both.
TEST(CliMd, TwoRanksOverDomainsRunTheOneRankRun) {
  const std::string dir = kScratch.fresh("domains");
  write_long_argon(dir);
  const std::string inputs = " md -f " + dir + "/run.mdp -c " + dir + "/conf.gro -p " + dir + "/topol.top -nt 1 -cpt 0 -deffnm " + dir;
  const auto one = run_qk(inputs + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + inputs + "/two -decomp domains");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("domain decomposition: 2 slabs along x of 2.860 nm"), std::string::npos) << two.output;
  const std::string log = qk::read_file(dir + "/two.log");
  EXPECT_NE(log.find(" Domain decomp. "), std::string::npos) << log;
  EXPECT_NE(log.find(" Comm. coord./force "), std::string::npos) << log;
  const std::vector<double> a = last_energies(qk::read_file(dir + "/one.log"));
  const std::vector<double> b = last_energies(log);
  ASSERT_GE(a.size(), 8u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-5 * std::abs(a[i])) << "term " << i;
  // Every atom in the final structure and the trajectory, as alone (xtc sizes follow float rounding: 2%).
  EXPECT_EQ(qk::read_file(dir + "/two.gro").size(), qk::read_file(dir + "/one.gro").size());
  const double xtc_one = static_cast<double>(qk::read_file(dir + "/one.xtc").size());
  EXPECT_NEAR(static_cast<double>(qk::read_file(dir + "/two.xtc").size()), xtc_one, 0.02 * xtc_one);
  EXPECT_TRUE(std::filesystem::exists(dir + "/two.cpt")) << two.output;
  // Asked for domains where two slabs do not fit: refused before anything is written.
  const std::string thin = kScratch.fresh("thin");
  const auto refused = run_qk("run --nproc-per-node 2 -- " + std::string(QK_BIN) + " md -f " + kWater + "run.mdp -c " +
                              kWater + "conf.gro -p " + kWater + "topol.top -nsteps 2 -decomp domains -deffnm " + thin + "/t");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("-decomp domains over 2 ranks: 2 slabs of a 2.500 nm box are 1.250 nm wide"),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(std::filesystem::exists(thin + "/t.log"));
}

// Four processes on a 2 x 2 grid (argon twice along each axis with a 1.45 nm cut-off: four slabs would be
// too thin), each with halos from four neighbours, run the one-process run.
TEST(CliMd, FourRanksOnAGridRunTheOneRankRun) {
  const std::string dir = kScratch.fresh("grid");
  write_long_argon(dir, /*cube=*/true);
  const std::string inputs = " md -f " + dir + "/run.mdp -c " + dir + "/conf.gro -p " + dir + "/topol.top -nt 1 -deffnm " + dir;
  const auto one = run_qk(inputs + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto four = run_qk("run --nproc-per-node 4 -- " + std::string(QK_BIN) + inputs + "/four -decomp domains");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  EXPECT_NE(four.output.find("domain decomposition: a 2 x 2 grid across x and y, cells of 2.860 x 2.860 nm"),
            std::string::npos)
      << four.output;
  const std::vector<double> a = last_energies(qk::read_file(dir + "/one.log"));
  const std::vector<double> b = last_energies(qk::read_file(dir + "/four.log"));
  ASSERT_GE(a.size(), 8u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-5 * std::abs(a[i])) << "term " << i;
  EXPECT_EQ(qk::read_file(dir + "/four.gro").size(), qk::read_file(dir + "/one.gro").size());
}

// The argon trajectory mdp (positions every step, velocities and forces every second, compressed positions
// every step): NAME.trr, NAME.xtc and NAME.edr with the frames gmx mdrun writes for it
// (tests/hpc/md/trr_test.cc, xtc_test.cc and edr_test.cc compare their contents).
TEST(CliMd, TrajectoryMdpWritesTheTrrAndXtc) {
  const std::string argon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon/";
  const std::string dir = kScratch.fresh("argon");
  const auto r = run_qk("md -f " + argon + "traj.mdp -c " + argon + "conf.gro -p " + argon + "topol.top -deffnm " +
                        dir + "/a -nt 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(dir + "/a.trr"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir + "/a.xtc"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir + "/a.edr"), std::string::npos) << r.output;
  // GROMACS's energy file: its names magic (-55555) first, and the terms and frames gmx mdrun writes for
  // this run, so the same size (edr_test.cc compares the values).
  const std::string edr = qk::read_file(dir + "/a.edr");
  ASSERT_GE(edr.size(), 4u);
  EXPECT_EQ(edr.substr(0, 4), std::string("\xff\xff\x26\xfd", 4));
  EXPECT_EQ(edr.size(), qk::read_file(argon + "traj_reference.edr").size());
  // Packed sizes follow the positions' last grid point, which float rounding may move: within 2%.
  const double xtc = static_cast<double>(qk::read_file(dir + "/a.xtc").size()),
               gmx_xtc = static_cast<double>(qk::read_file(argon + "traj_reference.xtc").size());
  EXPECT_NEAR(xtc / gmx_xtc, 1.0, 0.02);
  const std::string ours = qk::read_file(dir + "/a.trr"), theirs = qk::read_file(argon + "traj_reference.trr");
  EXPECT_EQ(ours.size(), theirs.size()) << "the same 3 frames and blocks as gmx mdrun's";
  const auto other = run_qk("md -f " + argon + "traj.mdp -c " + argon + "conf.gro -p " + argon + "topol.top -g " +
                            dir + "/b.log -o " + dir + "/b.gro -trr " + dir + "/elsewhere.trr -e " + dir + "/b.edr -x " +
                            dir + "/b.xtc -cpo " + dir + "/b.cpt -nt 1");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/elsewhere.trr")) << other.output;
}

// qk md killed (SIGKILL, as a crashed node) in the middle of a run with frequent checkpoints, then run
// again with -cpi: it goes on from its newest checkpoint, and its log and trajectories end as those of a
// run that was never killed (every energy block and frame once; the same file sizes).
TEST(CliMd, KilledRunGoesOnFromItsCheckpoint) {
  const std::string argon = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/argon/";
  const std::string dir = kScratch.fresh("killed");
  const std::string mdp = dir + "/run.mdp";
  std::string text = qk::read_file(argon + "traj.mdp");
  text.replace(text.find("tcoupl          = no"), 20, "tcoupl = V-rescale\ntc-grps = System\ntau-t = 0.1\nref-t = 120\nnsttcouple = 1");
  text.replace(text.find("nsteps          = 2"), 19, "nsteps          = 20");
  text.replace(text.find("gen_vel         = no"), 20, "gen_vel = yes\ngen_temp = 120\ngen_seed = 5");
  qk::atomic_write_file(mdp, text);
  const std::string inputs = "md -f " + mdp + " -c " + argon + "conf.gro -p " + argon + "topol.top -nt 1 ";
  const auto whole = run_qk(inputs + "-deffnm " + dir + "/a");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // A checkpoint at nearly every step (-cpt in minutes); killed at the start of step 13.
  const auto killed = run_qk(inputs + "-deffnm " + dir + "/b -cpt 0.000001", "QK_FAULT_KILL=md_step:0:13");
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/b.cpt")) << killed.output;
  const auto resumed = run_qk(inputs + "-deffnm " + dir + "/b -cpi " + dir + "/b.cpt");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("going on from"), std::string::npos) << resumed.output;
  for (const char* ext : {".trr", ".xtc", ".edr"}) {
    const double a = static_cast<double>(std::filesystem::file_size(dir + "/a" + ext)),
                 b = static_cast<double>(std::filesystem::file_size(dir + "/b" + ext));
    EXPECT_NEAR(b / a, 1.0, ext == std::string(".trr") ? 0.0 : 0.02) << ext;  // .xtc packs to the positions
  }
  auto blocks = [](const std::string& log) {
    size_t n = 0;
    for (size_t p = log.find("   Energies (kJ/mol)"); p != std::string::npos; p = log.find("   Energies (kJ/mol)", p + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(blocks(qk::read_file(dir + "/b.log")), blocks(qk::read_file(dir + "/a.log")));
  EXPECT_EQ(blocks(qk::read_file(dir + "/a.log")), 22u);  // steps 0..20, then the averages over them
}

TEST(CliMd, HelpAndBadInput) {
  const auto help = run_qk("md -h");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("-deffnm"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("-trr FILE"), std::string::npos) << help.output;
  const auto missing = run_qk("md -f /nonexistent/run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent/run.mdp"), std::string::npos) << missing.output;
  const auto bogus = run_qk("md -bogus");
  EXPECT_NE(bogus.exit_code, 0);
  EXPECT_NE(bogus.output.find("-bogus"), std::string::npos) << bogus.output;
  const auto nb = run_qk("md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top -nb tpu");
  EXPECT_NE(nb.exit_code, 0);
  EXPECT_NE(nb.output.find("-nb: expected cpu or gpu, got 'tpu'"), std::string::npos) << nb.output;
}

// -nb gpu and -pme gpu: on a machine with a CUDA GPU the run says where its pair forces or PME ran;
// without one (or with -double) it stops before writing anything and says to use the CPU.
TEST(CliMd, NonbondedOnTheGpuRunsThereOrSaysWhyNot) {
  const std::string dir = kScratch.fresh("nb_gpu");
  const std::string inputs = "md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top -deffnm " +
                             dir + "/g -nsteps 5 -nb gpu";
  const auto r = run_qk(inputs);
  if (r.exit_code == 0) {
    EXPECT_NE(r.output.find("short-range pair forces on cuda:"), std::string::npos) << r.output;
    EXPECT_NE(qk::read_file(dir + "/g.log").find("-1.98330e+04"), std::string::npos) << "GROMACS's step-0 Potential";
  } else {
    EXPECT_NE(r.output.find("run them on the CPU (-nb cpu)"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "nothing written: " << r.output;
  }
  const auto dbl = run_qk(inputs + " -double");
  EXPECT_NE(dbl.exit_code, 0);
  EXPECT_NE(dbl.output.find("single precision"), std::string::npos) << dbl.output;
  // -pme gpu alike.
  const std::string pme_dir = kScratch.fresh("pme_gpu");
  const auto pme = run_qk("md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top -deffnm " +
                          pme_dir + "/p -nsteps 5 -pme gpu");
  if (pme.exit_code == 0) {
    EXPECT_NE(pme.output.find("PME on cuda:"), std::string::npos) << pme.output;
  } else {
    EXPECT_NE(pme.output.find("run it on the CPU (-pme cpu)"), std::string::npos) << pme.output;
    EXPECT_TRUE(std::filesystem::is_empty(pme_dir)) << "nothing written: " << pme.output;
  }
  const auto bad = run_qk("md -f " + kWater + "run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top -pme tpu");
  EXPECT_NE(bad.output.find("-pme: expected cpu or gpu, got 'tpu'"), std::string::npos) << bad.output;
}

}  // namespace

namespace {

// tc-grps naming the groups of an index file (-n): each group coupled on its own, its degrees of freedom in
// the header; a group that does not exist is named with the groups there are.
TEST(CliMd, IndexFileGroupsAreTemperatureCouplingGroups) {
  const std::string dir = kScratch.fresh("tcgroups");
  std::string text = qk::read_file(kWater + "run.mdp");
  text.replace(text.find("tcoupl          = no"), 20,
               "tcoupl = V-rescale\ntc-grps = First Second\ntau-t = 0.1 0.1\nref-t = 300 250");
  qk::atomic_write_file(dir + "/run.mdp", text);
  std::string ndx = "[ First ]\n";
  for (int a = 1; a <= 765; ++a) ndx += std::to_string(a) + "\n";  // the first 255 waters of 510
  ndx += "[ Second ]\n";
  for (int a = 766; a <= 1530; ++a) ndx += std::to_string(a) + "\n";
  qk::atomic_write_file(dir + "/index.ndx", ndx);
  const std::string inputs = "md -f " + dir + "/run.mdp -c " + kWater + "conf.gro -p " + kWater + "topol.top ";
  const auto r = run_qk(inputs + "-n " + dir + "/index.ndx -deffnm " + dir + "/w -nsteps 2 -nt 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 765 atoms under SETTLE: 2 x 765 degrees of freedom, less half of the centre of mass's 3.
  EXPECT_NE(r.output.find("T-coupling group First: 765 atoms, 1528.50 degrees of freedom, ref-t 300 K"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("T-coupling group Second: 765 atoms, 1528.50 degrees of freedom, ref-t 250 K"),
            std::string::npos)
      << r.output;
  const auto missing = run_qk(inputs + "-deffnm " + dir + "/m -nsteps 2 -nt 1");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("no group named 'First'"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("-n"), std::string::npos) << missing.output;
}

}  // namespace

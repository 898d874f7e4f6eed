// `qk md`'s work as a library call: GROMACS-style arguments, then a run from
// the fixture files that writes the log and the final coordinates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "qk/base/error.h"
#include "qk/hpc/md/mdrun.h"

namespace fs = std::filesystem;

TEST(MdrunArgs, GromacsOptionsAndDeffnm) {
  qk::md::MdrunArgs a = qk::md::parse_mdrun_args(
      {"-f", "run.mdp", "-c", "in.gro", "-p", "w.top", "-deffnm", "out/water", "-nsteps", "50", "-nt", "2"});
  EXPECT_EQ(a.mdp, "run.mdp");
  EXPECT_EQ(a.conf, "in.gro");
  EXPECT_EQ(a.top, "w.top");
  EXPECT_EQ(a.log, "out/water.log");
  EXPECT_EQ(a.confout, "out/water.gro");
  EXPECT_EQ(a.trajectory, "out/water.trr");
  EXPECT_EQ(a.compressed_trajectory, "out/water.xtc");
  EXPECT_EQ(a.nsteps, 50);
  EXPECT_EQ(a.threads, 2);
  // An output named on the command line stays, before or after -deffnm; the others take its name.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-g", "my.log", "-deffnm", "run"},
                                               std::vector<std::string>{"-deffnm", "run", "-g", "my.log"}}) {
    const qk::md::MdrunArgs g = qk::md::parse_mdrun_args(args);
    EXPECT_EQ(g.log, "my.log");
    EXPECT_EQ(g.energy_file, "run.edr");
    EXPECT_EQ(g.checkpoint, "run.cpt");
  }
  qk::md::MdrunArgs d = qk::md::parse_mdrun_args({});
  EXPECT_EQ(d.mdp, "grompp.mdp");
  EXPECT_EQ(d.log, "md.log");
  EXPECT_EQ(d.confout, "confout.gro");
  EXPECT_EQ(d.trajectory, "traj.trr");  // mdrun's names
  EXPECT_EQ(d.compressed_trajectory, "traj_comp.xtc");
  EXPECT_EQ(qk::md::parse_mdrun_args({"-x", "c.xtc", "-trr", "f.trr"}).compressed_trajectory, "c.xtc");
  EXPECT_EQ(a.checkpoint, "out/water.cpt");
  EXPECT_EQ(a.energy_file, "out/water.edr");
  EXPECT_EQ(d.energy_file, "ener.edr");  // mdrun's -e default
  EXPECT_EQ(qk::md::parse_mdrun_args({"-e", "x.edr"}).energy_file, "x.edr");
  EXPECT_EQ(d.checkpoint, "state.cpt");
  EXPECT_EQ(d.checkpoint_minutes, 15);  // mdrun's -cpt default
  EXPECT_TRUE(d.resume.empty());
  const qk::md::MdrunArgs c = qk::md::parse_mdrun_args({"-cpt", "0.5", "-cpi", "in.cpt", "-cpo", "out.cpt"});
  EXPECT_EQ(c.checkpoint_minutes, 0.5);
  EXPECT_EQ(c.resume, "in.cpt");
  EXPECT_EQ(c.checkpoint, "out.cpt");
  EXPECT_EQ(d.nsteps, -1);
  EXPECT_TRUE(qk::md::parse_mdrun_args({"-h"}).help);
  EXPECT_EQ(d.precision, qk::md::Precision::kMixed);  // as gmx; -double as gmx_d
  EXPECT_EQ(qk::md::parse_mdrun_args({"-double", "-nt", "1"}).precision, qk::md::Precision::kDouble);
}

TEST(MdrunArgs, BadOptionsSayWhich) {
  auto msg = [](std::vector<std::string> argv) {
    try {
      qk::md::parse_mdrun_args(argv);
    } catch (const qk::ValueError& e) {
      return e.message();
    }
    return std::string();
  };
  EXPECT_NE(msg({"-y", "1"}).find("'-y'"), std::string::npos);
  EXPECT_NE(msg({"-nsteps", "ten"}).find("'ten'"), std::string::npos);
  EXPECT_NE(msg({"-cpt", "5min"}).find("-cpt expects minutes"), std::string::npos);
  EXPECT_NE(msg({"-f"}).find("-f needs a value"), std::string::npos);
}

TEST(Mdrun, RunsTheReactionFieldWaterAndWritesLogAndGro) {
  const std::string fx = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/water_rf";
  const fs::path dir = fs::temp_directory_path() / ("qk_mdrun_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  qk::md::MdrunArgs a = qk::md::parse_mdrun_args({"-f", fx + "/run.mdp", "-c", fx + "/conf.gro", "-p",
                                                  fx + "/topol.top", "-deffnm", (dir / "w").string(), "-nsteps",
                                                  "3"});
  std::ostringstream console;
  qk::md::RunResult r = qk::md::mdrun(a, console);
  EXPECT_EQ(r.steps, 3);
  std::ifstream log_in(dir / "w.log");
  std::stringstream log;
  log << log_in.rdbuf();
  EXPECT_NE(log.str().find("   Energies (kJ/mol)"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("Long Range LJ corr.: <C6> 2.9078e-04"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("Performance:"), std::string::npos) << log.str();
  EXPECT_NE(console.str().find("Performance:"), std::string::npos) << console.str();
  qk::md::GroFile out = qk::md::read_gro((dir / "w.gro").string());
  EXPECT_EQ(out.atoms.size(), 1530u);
  EXPECT_TRUE(out.has_velocities);
  fs::remove_all(dir);
}

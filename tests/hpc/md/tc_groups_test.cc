// GROMACS's default atom groups and T-coupling groups against gmx make_ndx and grompp on the peptide in
// water with two ions (tests/fixtures/gen_md.sh peptide_water: groups_reference.txt, tc_reference.txt),
// index files, the errors at the edges, and a run that couples two groups to two temperatures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "index_groups.h"
#include "lincs.h"
#include "qk/base/error.h"
#include "qk/hpc/md/edr.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/md.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "tc_groups.h"

namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md/peptide_water/";

// The AMBER force field and residuetypes.dat come from the gromacs-data package.
bool have_gromacs_data() {
  return fs::exists(qk::md::gromacs_top_dir() + "/amber99sb-ildn.ff/forcefield.itp") &&
         fs::exists(qk::md::residuetypes_path());
}
#define NEED_GROMACS_DATA()                                                                   \
  if (!have_gromacs_data()) GTEST_SKIP() << "GROMACS's force fields are not installed here " \
                                            "(apt-get install -y gromacs-data, or set GMXDATA)"

struct System {
  qk::md::Topology top;
  qk::md::GroFile conf;
  qk::md::MdpOptions mdp;
  System()
      : top(qk::md::read_top(kDir + "topol.top")),
        conf(qk::md::read_gro(kDir + "conf.gro")),
        mdp(qk::md::read_mdp(kDir + "run.mdp")) {}
};

TEST(AtomGroups, DefaultGroupsEqualMakeNdxs) {
  NEED_GROMACS_DATA();
  const System s;
  const std::vector<qk::md::AtomGroup> ours = qk::md::default_groups(s.top, qk::md::residuetypes_path());
  std::ifstream in(kDir + "groups_reference.txt");
  std::string line;
  std::map<std::string, std::vector<int>> gromacs;  // name -> atoms, first, last (1-based)
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string name;
    int count = 0, first = 0, last = 0;
    f >> name >> count >> first >> last;
    gromacs[name] = {count, first, last};
  }
  // The groups qk md makes (not the protein's sub-groups: C-alpha, Backbone, ...), each as make_ndx's.
  for (const char* name : {"System", "Protein", "non-Protein", "Water", "SOL", "non-Water", "Ion", "Water_and_ions"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(gromacs.count(name));
    const qk::md::AtomGroup& g = qk::md::find_group(ours, name, "test");
    ASSERT_EQ(static_cast<int>(g.atoms.size()), gromacs[name][0]);
    EXPECT_EQ(g.atoms.front() + 1, gromacs[name][1]);
    EXPECT_EQ(g.atoms.back() + 1, gromacs[name][2]);
  }
  // Nothing GROMACS does not make (it makes no groups by residue name here: no residue of another type).
  for (const qk::md::AtomGroup& g : ours) EXPECT_TRUE(gromacs.count(g.name)) << g.name;
  // Names match case-insensitively, as in grompp: "Non-Protein" is non-Protein.
  EXPECT_EQ(qk::md::find_group(ours, "Non-Protein", "test").atoms.size(), 2597u);
}

TEST(AtomGroups, DegreesOfFreedomPerGroupEqualGrompps) {
  NEED_GROMACS_DATA();
  System s;
  std::vector<qk::md::AtomGroup> groups = qk::md::default_groups(s.top, qk::md::residuetypes_path());
  const std::vector<qk::md::BondConstraint> h_bonds = qk::md::h_bond_constraints(s.top);
  ASSERT_FALSE(h_bonds.empty());
  std::ifstream in(kDir + "tc_reference.txt");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string first, second, group;
    double ndf = 0;
    std::getline(f, first, '\t');
    std::getline(f, group, '\t');
    f >> ndf;
    std::istringstream names(first);
    s.mdp.tc_grps.clear();
    for (std::string g; names >> g;) s.mdp.tc_grps.push_back(g);
    s.mdp.tcoupl = qk::md::Thermostat::kVRescale;
    s.mdp.tau_t.assign(s.mdp.tc_grps.size(), 0.1);
    s.mdp.ref_t.assign(s.mdp.tc_grps.size(), 300);
    const qk::md::TcGroups tc = qk::md::tc_groups(s.top, h_bonds, s.mdp, groups);
    for (size_t g = 0; g < tc.names.size(); ++g)
      if (qk::md::find_group(groups, tc.names[g], "t").name == qk::md::find_group(groups, group, "t").name) {
        EXPECT_NEAR(tc.ndf[g], ndf, 0.006) << first << ": " << group;  // grompp prints two decimals
        ++checked;
      }
    EXPECT_NEAR(tc.total_ndf(), qk::md::degrees_of_freedom(s.top, s.mdp), 1e-9);
  }
  EXPECT_EQ(checked, 4);
}

TEST(AtomGroups, IndexFilesAndBadGroupingsAreCheckedAtTheEdge) {
  NEED_GROMACS_DATA();
  System s;
  const fs::path dir = fs::temp_directory_path() / ("qk_ndx_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream ndx(dir / "i.ndx");
    ndx << "[ Peptide ]\n";
    for (int a = 1; a <= 53; ++a) ndx << a << (a % 15 == 0 ? "\n" : " ");
    ndx << "\n[ Rest ]\n";
    for (int a = 54; a <= 2650; ++a) ndx << a << "\n";
  }
  std::vector<qk::md::AtomGroup> groups = qk::md::default_groups(s.top, qk::md::residuetypes_path());
  for (qk::md::AtomGroup& g : qk::md::read_ndx((dir / "i.ndx").string(), s.top.num_atoms())) groups.push_back(g);
  s.mdp.tcoupl = qk::md::Thermostat::kVRescale;
  s.mdp.tc_grps = {"Peptide", "Rest"};
  s.mdp.tau_t = {0.1, 0.1};
  s.mdp.ref_t = {300, 300};
  const qk::md::TcGroups tc = qk::md::tc_groups(s.top, qk::md::h_bond_constraints(s.top), s.mdp, groups);
  EXPECT_NEAR(tc.ndf[0], 130.93, 0.006);  // the same atoms as Protein
  // Overlapping, incomplete and unknown groupings; an atom number past the system.
  auto error_of = [&](std::vector<std::string> names) {
    s.mdp.tc_grps = names;
    s.mdp.tau_t.assign(names.size(), 0.1);
    s.mdp.ref_t.assign(names.size(), 300);
    try {
      qk::md::tc_groups(s.top, {}, s.mdp, groups);
    } catch (const qk::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({"Protein", "System"}).find("is in two T-coupling groups, Protein and System"), std::string::npos);
  EXPECT_NE(error_of({"Protein", "Water"}).find("2 atom(s) are in no T-coupling group (the first: atom 2649"),
            std::string::npos)
      << error_of({"Protein", "Water"});
  const std::string unknown = error_of({"Ligand"});
  EXPECT_NE(unknown.find("no group named 'Ligand'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("gmx make_ndx"), std::string::npos) << unknown;
  {
    std::ofstream bad(dir / "bad.ndx");
    bad << "[ X ]\n1 2 9999\n";
  }
  try {
    qk::md::read_ndx((dir / "bad.ndx").string(), s.top.num_atoms());
    ADD_FAILURE() << "an atom past the system was accepted";
  } catch (const qk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.ndx:2"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Two groups coupled to two temperatures reach them; the .edr carries T- and Lamb- of each, as GROMACS's.
TEST(AtomGroups, TwoGroupsAreCoupledToTheirOwnTemperatures) {
  NEED_GROMACS_DATA();
  System s;
  s.mdp.dt = 0.002;
  s.mdp.tcoupl = qk::md::Thermostat::kVRescale;
  s.mdp.tc_grps = {"Protein", "Non-Protein"};
  s.mdp.tau_t = {0.02, 0.02};
  s.mdp.ref_t = {200, 400};
  s.mdp.nsttcouple = 1;
  s.mdp.gen_vel = true;
  s.mdp.gen_temp = 300;
  s.mdp.gen_seed = 5;
  s.mdp.nstenergy = 10;
  const fs::path edr = fs::temp_directory_path() / ("qk_tc_" + std::to_string(::getpid()) + ".edr");
  qk::md::RunOptions opt;
  opt.nsteps = 300;
  opt.energy_file = edr.string();
  const qk::md::RunResult r = qk::md::run(s.top, s.mdp, s.conf, opt);
  double t_protein = 0, t_rest = 0;
  int frames = 0;
  for (const qk::md::EnergyFrame& e : r.frames) {
    ASSERT_EQ(e.group_temperature.size(), 2u);
    if (e.step < 100) continue;  // after 0.2 ps, ten coupling times
    t_protein += e.group_temperature[0];
    t_rest += e.group_temperature[1];
    ++frames;
  }
  // 130 degrees of freedom fluctuate by ~12%; the water's 5,193 by ~2%.
  EXPECT_NEAR(t_protein / frames, 200, 30);
  EXPECT_NEAR(t_rest / frames, 400, 12);
  const std::vector<qk::md::EdrTerm> terms = qk::md::read_edr(edr.string()).terms;
  std::vector<std::string> names;
  for (const qk::md::EdrTerm& t : terms) names.push_back(t.name);
  const std::vector<std::string> tail(names.end() - 4, names.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"T-Protein", "T-Non-Protein", "Lamb-Protein", "Lamb-Non-Protein"}));
  fs::remove(edr);
}

}  // namespace

// The GROMACS input readers: .gro, .mdp, .top (with its preprocessor). Bad
// input must fail with a message naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <unistd.h>

#include "qk/base/error.h"
#include "qk/hpc/md/gro.h"
#include "qk/hpc/md/mdp.h"
#include "qk/hpc/md/topology.h"
#include "common/reference_tool.h"

namespace fs = std::filesystem;
using qk::md::GroFile;

namespace {

const std::string kFixtures = std::string(QK_SOURCE_DIR) + "/tests/fixtures/md";

// The message of the ValueError `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const qk::ValueError& e) {
    return e.message();
  }
  return "";
}

// A scratch folder per test, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("qk_md_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

const char kTinyGro[] =
    "two waters\n"
    "    6\n"
    "    1SOL     OW    1   0.126   1.624   1.679  0.1227 -0.0580  0.0434\n"
    "    1SOL    HW1    2   0.190   1.661   1.747  0.8085  0.3191 -0.7791\n"
    "    1SOL    HW2    3   0.177   1.568   1.613 -0.9045 -2.6469  1.3180\n"
    "    2SOL     OW    4   1.275   0.053   0.622  0.2519  0.3140 -0.1734\n"
    "    2SOL    HW1    5   1.337   0.002   0.680 -1.0641 -1.1349  0.0257\n"
    "    2SOL    HW2    6   1.326   0.120   0.568  1.9427 -0.8216 -0.0244\n"
    "   1.86206   1.86206   1.86206\n";

}  // namespace

TEST(Gro, ReadsAtomsVelocitiesAndBox) {
  GroFile g = qk::md::parse_gro(kTinyGro, "tiny.gro");
  EXPECT_EQ(g.title, "two waters");
  ASSERT_EQ(g.atoms.size(), 6u);
  EXPECT_TRUE(g.has_velocities);
  EXPECT_EQ(g.atoms[4].residue_number, 2);
  EXPECT_EQ(g.atoms[4].residue_name, "SOL");
  EXPECT_EQ(g.atoms[4].atom_name, "HW1");
  EXPECT_DOUBLE_EQ(g.atoms[4].x[0], 1.337);
  EXPECT_DOUBLE_EQ(g.atoms[4].v[1], -1.1349);
  EXPECT_DOUBLE_EQ(g.box[2], 1.86206);
  EXPECT_EQ(g.precision, 3);
}

TEST(Gro, ReadsTheFixturesNineDecimalsAndRoundTrips) {
  GroFile g = qk::md::read_gro(kFixtures + "/water_pme/conf.gro");
  EXPECT_EQ(g.atoms.size(), 1530u);
  EXPECT_EQ(g.precision, 9);
  EXPECT_FALSE(g.has_velocities);
  EXPECT_DOUBLE_EQ(g.atoms[0].x[0], 0.236971737);
  GroFile again = qk::md::parse_gro(qk::md::format_gro(g), "again.gro");
  ASSERT_EQ(again.atoms.size(), g.atoms.size());
  for (size_t i = 0; i < g.atoms.size(); ++i)
    for (int d = 0; d < 3; ++d) ASSERT_DOUBLE_EQ(again.atoms[i].x[d], g.atoms[i].x[d]);
  EXPECT_EQ(again.atoms[1529].atom_name, "HW2");
}

TEST(Gro, TruncatedFileNamesFileAndLine) {
  std::string text(kTinyGro);
  text = text.substr(0, text.find("    2SOL     OW"));  // three of six atoms, no box line
  std::string msg = error_of([&] { qk::md::parse_gro(text, "cut.gro"); });
  EXPECT_NE(msg.find("cut.gro:6:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Gro, MalformedCoordinateNamesTheLine) {
  std::string text(kTinyGro);
  text.replace(text.find("1.661"), 5, "1.6x1");
  std::string msg = error_of([&] { qk::md::parse_gro(text, "bad.gro"); });
  EXPECT_NE(msg.find("bad.gro:4:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.6x1"), std::string::npos) << msg;
}

TEST(Gro, RefusesTriclinicBoxes) {
  std::string text(kTinyGro);
  text.replace(text.find("   1.86206   1.86206   1.86206"), 30, "1.8 1.8 1.8 0 0 0.5 0 0 0");
  std::string msg = error_of([&] { qk::md::parse_gro(text, "tric.gro"); });
  EXPECT_NE(msg.find("tric.gro:9:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("triclinic"), std::string::npos) << msg;
}

TEST(Mdp, ReadsKeysWithDashOrUnderscoreAndComments) {
  qk::md::MdpOptions o = qk::md::parse_mdp(
      "; a comment\n"
      "integrator = md\n"
      "dt = 0.002 ; ps\n"
      "nsteps = 50\n"
      "coulombtype = PME\n"
      "rcoulomb = 0.9\nrvdw = 0.9\n"
      "fourierspacing = 0.15\nfourier_nx = 20\n"
      "pme-order = 6\n"
      "DispCorr = EnerPres\n"
      "tcoupl = V-rescale\ntc-grps = System\ntau_t = 0.1\nref_t = 300\n"
      "nstxout = 100\n"
      "define = -DFLEXIBLE -DPOSRES=2\n",
      "run.mdp");
  EXPECT_EQ(o.integrator, qk::md::Integrator::kMd);
  EXPECT_DOUBLE_EQ(o.dt, 0.002);
  EXPECT_EQ(o.nsteps, 50);
  EXPECT_EQ(o.coulomb_type, qk::md::CoulombType::kPme);
  EXPECT_DOUBLE_EQ(o.fourier_spacing, 0.15);
  EXPECT_EQ(o.fourier_nx, 20);
  EXPECT_EQ(o.pme_order, 6);
  EXPECT_EQ(o.disp_corr, qk::md::DispCorr::kEnerPres);
  EXPECT_EQ(o.tcoupl, qk::md::Thermostat::kVRescale);
  EXPECT_EQ(o.ref_t, std::vector<double>{300});
  EXPECT_EQ(o.defines, (std::vector<std::string>{"FLEXIBLE", "POSRES=2"}));
}

TEST(Mdp, UnknownKeyIsAnErrorNamingFileLineAndKey) {
  std::string msg = error_of([] { qk::md::parse_mdp("dt = 0.002\nfrobnicate = yes\n", "run.mdp"); });
  EXPECT_NE(msg.find("run.mdp:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("frobnicate"), std::string::npos) << msg;
}

TEST(Mdp, UnsupportedValueAndMalformedLineAreErrors) {
  std::string msg = error_of([] { qk::md::parse_mdp("coulombtype = Cut-off\n", "a.mdp"); });
  EXPECT_NE(msg.find("a.mdp:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Cut-off"), std::string::npos) << msg;
  msg = error_of([] { qk::md::parse_mdp("dt = 0.002\n\nnsteps 10\n", "b.mdp"); });
  EXPECT_NE(msg.find("b.mdp:3:"), std::string::npos) << msg;
  msg = error_of([] { qk::md::parse_mdp("dt = fast\n", "c.mdp"); });
  EXPECT_NE(msg.find("c.mdp:1:"), std::string::npos) << msg;
  msg = error_of([] { qk::md::parse_mdp("nsteps = 1\nnsteps = 2\n", "d.mdp"); });
  EXPECT_NE(msg.find("d.mdp:2:"), std::string::npos) << msg;
  // Two coupling groups need two tau-t and two ref-t values; tau-t is positive or -1 (uncoupled).
  msg = error_of([] {
    qk::md::parse_mdp("tcoupl = V-rescale\ntc-grps = Protein Non-Protein\ntau-t = 0.1\nref-t = 300 300\n", "e.mdp");
  });
  EXPECT_NE(msg.find("give one of each per group"), std::string::npos) << msg;
  msg = error_of([] { qk::md::parse_mdp("tcoupl = V-rescale\ntau-t = 0\nref-t = 300\n", "f.mdp"); });
  EXPECT_NE(msg.find("tau-t of group System must be > 0"), std::string::npos) << msg;
  const qk::md::MdpOptions two = qk::md::parse_mdp(
      "tcoupl = V-rescale\ntc-grps = Protein Non-Protein\ntau-t = 0.1 -1\nref-t = 300 310\n", "g.mdp");
  EXPECT_EQ(two.tc_grps, (std::vector<std::string>{"Protein", "Non-Protein"}));
  EXPECT_EQ(two.tau_t, (std::vector<double>{0.1, -1}));
  EXPECT_EQ(two.ref_t, (std::vector<double>{300, 310}));
}

TEST(Top, ReadsTheSpcFixtureThroughItsPreprocessor) {
  qk::md::Topology top = qk::md::read_top(kFixtures + "/water_pme/topol.top");
  ASSERT_EQ(top.num_atoms(), 1530);
  EXPECT_EQ(top.comb_rule, 3);
  EXPECT_TRUE(top.gen_pairs);
  EXPECT_DOUBLE_EQ(top.fudge_qq, 0.5);
  EXPECT_DOUBLE_EQ(top.charge[0], -0.82);
  EXPECT_DOUBLE_EQ(top.charge[1], 0.41);
  // Not HEAVY_H: the #else branch's masses.
  EXPECT_DOUBLE_EQ(top.mass[0], 15.9994);
  EXPECT_DOUBLE_EQ(top.mass[2], 1.008);
  ASSERT_EQ(top.settles.size(), 510u);
  EXPECT_EQ(top.settles[1].ow, 3);
  EXPECT_DOUBLE_EQ(top.settles[0].doh, 0.1);
  EXPECT_DOUBLE_EQ(top.settles[0].dhh, 0.1633);
  EXPECT_TRUE(top.bonds.empty());  // not FLEXIBLE
  EXPECT_EQ(top.exclusions[3], (std::vector<int>{4, 5}));
  EXPECT_EQ(top.exclusions[5], (std::vector<int>{3, 4}));
  // OW-OW from sigma 0.316557 nm, epsilon 0.650194 kJ/mol.
  const double s6 = std::pow(0.316557, 6);
  EXPECT_NEAR(top.c6(top.type[0], top.type[0]), 4 * 0.650194 * s6, 1e-15);
  EXPECT_NEAR(top.c12(top.type[0], top.type[0]), 4 * 0.650194 * s6 * s6, 1e-18);
  EXPECT_EQ(top.c6(top.type[0], top.type[1]), 0.0);
}

TEST(Top, DefinesSelectBranchesAndBondsGenerateExclusions) {
  qk::md::TopOptions opt;
  opt.defines = {"FLEXIBLE", "HEAVY_H"};
  qk::md::Topology top = qk::md::read_top(kFixtures + "/water_pme/topol.top", opt);
  EXPECT_TRUE(top.settles.empty());
  ASSERT_EQ(top.bonds.size(), 1020u);
  EXPECT_DOUBLE_EQ(top.bonds[0].kb, 345000);
  ASSERT_EQ(top.angles.size(), 510u);
  EXPECT_NEAR(top.angles[0].theta0, 109.47 * M_PI / 180, 1e-12);
  EXPECT_DOUBLE_EQ(top.mass[0], 9.9514);  // HEAVY_H
  EXPECT_EQ(top.exclusions[1], (std::vector<int>{0, 2}));  // nrexcl 2 over the two bonds
}

TEST(Top, IncludesMacrosAndTypeLookups) {
  TempDir dir;
  dir.write("ff.itp",
            "#define KB 1000.0\n"
            "[ defaults ]\n1 2 no 1.0 1.0\n"
            "[ atomtypes ]\n"
            "; name bond_type mass charge ptype sigma eps\n"
            "CA  C  12.011 0.0 A 0.34 0.36\n"
            "HA  H   1.008 0.0 A 0.25 0.06\n"
            "[ bondtypes ]\nC H 1 0.109 KB\n"
            "[ angletypes ]\nH C H 1 109.5 300.0\n");
  std::string top = dir.write("topol.top",
                              "#include \"ff.itp\"\n"
                              "[ moleculetype ]\nCH2 1\n"
                              "[ atoms ]\n1 HA 1 M H1 1 0.1\n2 CA 1 M C 1 -0.2\n3 HA 1 M H2 1 0.1\n"
                              "[ bonds ]\n1 2 1\n2 3 1\n"
                              "[ angles ]\n1 2 3 1\n"
                              "[ system ]\ntest\n[ molecules ]\nCH2 2\n");
  qk::md::Topology t = qk::md::read_top(top);
  ASSERT_EQ(t.num_atoms(), 6);
  ASSERT_EQ(t.bonds.size(), 4u);
  EXPECT_DOUBLE_EQ(t.bonds[0].b0, 0.109);
  EXPECT_DOUBLE_EQ(t.bonds[0].kb, 1000.0);  // through the macro
  EXPECT_EQ(t.bonds[2].i, 3);              // second molecule, offset by 3
  ASSERT_EQ(t.angles.size(), 2u);
  EXPECT_DOUBLE_EQ(t.angles[1].k_theta, 300.0);
  EXPECT_DOUBLE_EQ(t.mass[1], 12.011);
  EXPECT_EQ(t.exclusions[0], (std::vector<int>{1}));  // nrexcl 1
  // Lorentz-Berthelot for C-H.
  const double s = 0.5 * (0.34 + 0.25), e = std::sqrt(0.36 * 0.06);
  EXPECT_NEAR(t.c6(t.type[0], t.type[1]), 4 * e * std::pow(s, 6), 1e-15);
}

TEST(Top, UnknownDirectiveAndBadLinesNameFileAndLine) {
  TempDir dir;
  std::string a = dir.write("a.top", "[ defaults ]\n1 2\n\n[ cmap ]\n1 2 3 4 5 1\n");
  std::string msg = error_of([&] { qk::md::read_top(a); });
  EXPECT_NE(msg.find("a.top:4:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cmap"), std::string::npos) << msg;
  std::string b = dir.write("b.itp", "[ defaults ]\n1 2\n[ atomtypes ]\nAR 39.9 0.0 A 0.34\n");
  std::string bt = dir.write("b.top", "; top\n#include \"b.itp\"\n");
  msg = error_of([&] { qk::md::read_top(bt); });
  EXPECT_NE(msg.find("b.itp:4:"), std::string::npos) << msg;
  std::string c = dir.write("c.top", "[ defaults ]\n1 2\n#ifdef X\n#frob\n#endif\n#frob\n");
  msg = error_of([&] { qk::md::read_top(c); });
  EXPECT_NE(msg.find("c.top:6:"), std::string::npos) << msg;  // the first #frob is in a skipped branch
  std::string d = dir.write("d.top", "#include \"nowhere.itp\"\n");
  msg = error_of([&] { qk::md::read_top(d); });
  EXPECT_NE(msg.find("d.top:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nowhere.itp"), std::string::npos) << msg;
}

// [ dihedrals ] a molecule cannot have: a function type qk md does not compute, no [ dihedraltypes ]
// entry, the wrong count of numbers; each names the file, line and what to fix.
TEST(Top, BadDihedralsSayWhy) {
  TempDir dir;
  const std::string head = "[ defaults ]\n1 2\n[ atomtypes ]\nC 12.0 0.0 A 0.34 0.36\n"
                           "[ dihedraltypes ]\nC C C C 3 1 2 3 4 5 6\n"
                           "[ moleculetype ]\nM 3\n[ atoms ]\n1 C 1 M C1 1 0\n2 C 1 M C2 1 0\n3 C 1 M C3 1 0\n"
                           "4 C 1 M C4 1 0\n[ dihedrals ]\n";
  struct Case { const char *line, *says; };
  for (Case c : {Case{"1 2 3 4 5", "function type 5 is not supported"},
                 Case{"1 2 3 4 9", "no [ dihedraltypes ] entry for function type 9 and C-C-C-C"},
                 Case{"1 2 3 4 1 0 10", "takes 3 numbers (phi0 k multiplicity), got 2"},
                 Case{"1 2 3 4 1 0 10 1.5", "multiplicity must be a whole number"},
                 Case{"1 2 3 9 3", "atom 9 is not in molecule M"}}) {
    const std::string top = dir.write("d.top", head + c.line + "\n");
    const std::string msg = error_of([&] { qk::md::read_top(top); });
    EXPECT_NE(msg.find("d.top:15:"), std::string::npos) << c.line << ": " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.line << ": " << msg;
  }
}

// GROMACS's own force-field folders (gromacs-data): everything in them that a
// water/ion topology pulls in must parse, [ dihedraltypes ] and macros included.
TEST(Top, ReadsInstalledForceFieldsWaterAndIons) {
  if (!fs::exists(qk::md::gromacs_top_dir() + "/oplsaa.ff/forcefield.itp"))
    QK_MISSING_REFERENCE_TOOL("GROMACS's force fields in " + qk::md::gromacs_top_dir() +
                              " (Debian: gromacs-data, installed with gromacs)");
  TempDir dir;
  struct Case { const char *ff, *water, *o_type; double o_charge; };
  for (Case c : {Case{"oplsaa", "spc", "opls_116", -0.82}, Case{"oplsaa", "tip3p", "opls_111", -0.834},
                 Case{"amber99sb-ildn", "tip3p", "OW", -0.834}, Case{"amber99sb-ildn", "spce", "OW_spc", -0.8476}}) {
    std::string top = dir.write(std::string(c.ff) + "_" + c.water + ".top",
                                std::string("#include \"") + c.ff + ".ff/forcefield.itp\"\n#include \"" + c.ff +
                                    ".ff/" + c.water + ".itp\"\n#include \"" + c.ff +
                                    ".ff/ions.itp\"\n[ system ]\nw\n[ molecules ]\nSOL 2\nNA 1\nCL 1\n");
    qk::md::Topology t = qk::md::read_top(top);
    SCOPED_TRACE(top);
    ASSERT_EQ(t.num_atoms(), 8);
    EXPECT_EQ(t.atom_types[t.type[0]].name, c.o_type);
    EXPECT_DOUBLE_EQ(t.charge[0], c.o_charge);
    EXPECT_EQ(t.settles.size(), 2u);
    EXPECT_DOUBLE_EQ(t.charge[6], 1.0);
    EXPECT_DOUBLE_EQ(t.charge[7], -1.0);
  }
}

TEST(Mdp, OutputKeysAreAcceptedAndRecordedAsWithoutEffect) {
  qk::md::MdpOptions o = qk::md::parse_mdp(
      "nstxout = 100\nnstvout = 0\nnstfout=50\nnstxout_compressed = 10\ncompressed-x-precision = 100\n"
      "compressed-x-grps = System\ntitle = x\n",
      "out.mdp");
  EXPECT_EQ(o.keys_without_effect, (std::vector<std::string>{"title"}));
  EXPECT_EQ(o.nstxout_compressed, 10);  // the .xtc's (xtc.h)
  EXPECT_EQ(o.compressed_x_precision, 100);
  EXPECT_THROW(qk::md::parse_mdp("compressed-x-grps = Protein\n", "grp.mdp"), qk::Error);  // System only
  EXPECT_THROW(qk::md::parse_mdp("compressed-x-precision = 0\n", "prec.mdp"), qk::Error);
  EXPECT_EQ(o.nstxout, 100);  // the .trr's (trr.h)
  EXPECT_EQ(o.nstvout, 0);
  EXPECT_EQ(o.nstfout, 50);
  EXPECT_THROW(qk::md::parse_mdp("nstxout = -1\n", "neg.mdp"), qk::Error);
  EXPECT_THROW(qk::md::parse_mdp("nstenergy = -5\n", "neg.mdp"), qk::Error);
}

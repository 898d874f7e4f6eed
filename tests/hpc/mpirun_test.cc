// Multi-rank HPL and HPCG: the helper binary under mpirun, each run bounded
// by a timeout so a bug can never hang the suite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

struct MpiRun {
  int code = -1;
  std::string out;
};

// When this process itself is a singleton MPI job (the in-process tests ran
// first), its OMPI_/PMIX_ variables would make mpirun's children join it.
std::string clean_env() {
  std::string s = "env";
  for (char** e = environ; *e; ++e) {
    std::string v = *e;
    if (v.rfind("OMPI_", 0) == 0 || v.rfind("PMIX_", 0) == 0 || v.rfind("ORTE_", 0) == 0)
      s += " -u " + v.substr(0, v.find('='));
  }
  return s;
}

// Each run keeps its session directory in a folder of its own: Open MPI 4
// creates /tmp/ompi.HOST.UID for every job, and two jobs starting at once
// (ctest -j2) can both try to make it and one fails ("mkdir ... File exists",
// orte_init failed).
MpiRun mpirun_once(int np, const std::string& args, int timeout_s) {
  char session[] = "/tmp/qk_mpirun_XXXXXX";
  MpiRun r;
  if (!::mkdtemp(session)) return r;
  std::string cmd = clean_env() + " OMPI_MCA_orte_tmpdir_base=" + session + " timeout -k 5 " +
                    std::to_string(timeout_s) + " " QK_MPIRUN " --allow-run-as-root --oversubscribe -np " +
                    std::to_string(np) + " '" QK_HPC_HELPER "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = ::pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::error_code ec;
  std::filesystem::remove_all(session, ec);
  return r;
}

// Open MPI 4's launcher on a loaded machine sometimes loses a rank that ran
// to the end ("mpiexec has exited due to process rank 0 with PID 0 ...
// exiting improperly", its RESULT line printed, exit 1: seen 1 run in 3 of
// the 4-rank HPCG case beside two busy processes on 2 cores). That is the
// launcher's race, not the case's result: such a run is made once more.
MpiRun mpirun(int np, const std::string& args, int timeout_s = 60) {
  MpiRun r = mpirun_once(np, args, timeout_s);
  if (r.code != 0 && r.out.find("exiting improperly") != std::string::npos) r = mpirun_once(np, args, timeout_s);
  return r;
}

std::string xsum(const std::string& out) {
  auto pos = out.find("XSUM ");
  return pos == std::string::npos ? "" : out.substr(pos + 5, out.find('\n', pos) - pos - 5);
}

TEST(HplMpi, GridsOneByTwoTwoByOneTwoByTwoPass) {
  struct Case {
    int p, q;
    const char* extra;
  };
  for (const Case& c : {Case{1, 2, "depth=1 bcast=1"}, Case{2, 1, "depth=0 bcast=0"},
                        Case{2, 2, "depth=1 bcast=1"}, Case{2, 2, "depth=0 bcast=2 pfact=0"}}) {
    for (const char* nnb : {"n=7 nb=16", "n=257 nb=32", "n=500 nb=64"}) {
      const std::string args = std::string("hpl ") + nnb + " p=" + std::to_string(c.p) +
                               " q=" + std::to_string(c.q) + " " + c.extra;
      MpiRun r = mpirun(c.p * c.q, args);
      EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
      EXPECT_NE(r.out.find("RESULT passed=1"), std::string::npos) << args << "\n" << r.out;
    }
  }
}

TEST(HplMpi, TwoRingsAndColumnMajorOnThreeColumns) {
  for (const char* args : {"hpl n=300 nb=24 p=1 q=3 bcast=2", "hpl n=300 nb=24 p=1 q=3 bcast=3",
                           "hpl n=300 nb=24 p=3 q=1 pmap=1 rfact=0 pfact=1"}) {
    MpiRun r = mpirun(3, args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("RESULT passed=1"), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(HplMpi, SolutionDoesNotDependOnTheGridBeyondRoundoff) {
  MpiRun a = mpirun(1, "hpl n=200 nb=32 p=1 q=1");
  MpiRun b = mpirun(4, "hpl n=200 nb=32 p=2 q=2");
  ASSERT_FALSE(xsum(a.out).empty()) << a.out;
  ASSERT_FALSE(xsum(b.out).empty()) << b.out;
  EXPECT_NEAR(std::stod(xsum(a.out)), std::stod(xsum(b.out)), 1e-9 * std::fabs(std::stod(xsum(a.out))));
}

TEST(HplMpi, CorruptedUpdateFailsOnTwoByTwo) {
  MpiRun r = mpirun(4, "hpl n=200 nb=32 p=2 q=2 fault=1");
  EXPECT_NE(r.out.find("RESULT passed=0"), std::string::npos) << r.out;
  EXPECT_NE(r.code, 0);
}

TEST(HplMpi, GridLargerThanTheJobIsAnErrorNotAHang) {
  MpiRun r = mpirun(2, "hpl n=100 nb=16 p=2 q=2", 30);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: " << r.out;  // 124 is timeout's code
  EXPECT_NE(r.out.find("needs that many ranks"), std::string::npos) << r.out;
}

TEST(HpcgMpi, TwoAndFourRanksValidate) {
  for (int np : {2, 4}) {
    for (const char* path : {"ref=0", "ref=1"}) {
      MpiRun r = mpirun(np, std::string("hpcg nx=16 ") + path);
      EXPECT_EQ(r.code, 0) << np << " " << path << "\n" << r.out;
      EXPECT_NE(r.out.find("RESULT valid=1"), std::string::npos) << r.out;
    }
  }
}

TEST(HpcgMpi, AsymmetryIsDetectedAcrossRanks) {
  MpiRun r = mpirun(2, "hpcg nx=16 asym=1");
  EXPECT_NE(r.out.find("RESULT valid=0"), std::string::npos) << r.out;
}

}  // namespace

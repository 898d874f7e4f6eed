// HPL.dat parsing: the netlib file, its cross product, and errors that name
// the line.
#include <gtest/gtest.h>

#include <string>

#include "qk/base/error.h"
#include "qk/hpc/hpl.h"

namespace qk::hpc {
namespace {

// The sample HPL.dat shipped with netlib HPL 2.3.
const char* kNetlibDat = R"(HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
6            device out (6=stdout,7=stderr,file)
4            # of problems sizes (N)
29 30 34 35  Ns
4            # of NBs
1 2 3 4      NBs
0            PMAP process mapping (0=Row-,1=Column-major)
3            # of process grids (P x Q)
2 1 4        Ps
2 4 1        Qs
16.0         threshold
3            # of panel fact
0 1 2        PFACTs (0=left, 1=Crout, 2=Right)
2            # of recursive stopping criterium
2 4          NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
3            # of recursive panel fact.
0 1 2        RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
0            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
0            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
)";

TEST(HplDat, ParsesTheNetlibSample) {
  HplDat d = parse_hpl_dat(kNetlibDat, "HPL.dat");
  EXPECT_EQ(d.out_file, "HPL.out");
  EXPECT_EQ(d.device_out, 6);
  EXPECT_EQ(d.ns, (std::vector<int64_t>{29, 30, 34, 35}));
  EXPECT_EQ(d.nbs, (std::vector<int>{1, 2, 3, 4}));
  ASSERT_EQ(d.grids.size(), 3u);
  EXPECT_EQ(d.grids[1], (std::pair<int, int>{1, 4}));
  EXPECT_DOUBLE_EQ(d.threshold, 16.0);
  EXPECT_EQ(d.nbmins, (std::vector<int>{2, 4}));
  EXPECT_EQ(d.swap, 2);
  EXPECT_EQ(d.swap_threshold, 64);
  // Cross product: 3 grids x 4 N x 4 NB x 1 depth x 1 bcast x 3 rfact x 3 pfact x 2 nbmin x 1 ndiv.
  auto runs = d.runs();
  EXPECT_EQ(runs.size(), 3u * 4 * 4 * 3 * 3 * 2);
  EXPECT_EQ(runs.front().p, 2);
  EXPECT_EQ(runs.back().p, 4);
  EXPECT_EQ(runs.back().n, 35);
  EXPECT_EQ(hpl_tv(runs.front()), "WR00L2L2");
}

std::string with_line(int lineno, const std::string& replacement) {
  std::string s = kNetlibDat, out;
  size_t pos = 0;
  for (int l = 1; pos < s.size(); ++l) {
    size_t e = s.find('\n', pos);
    std::string line = s.substr(pos, e - pos);
    out += (l == lineno ? replacement : line) + "\n";
    pos = e + 1;
  }
  return out;
}

void expect_error_at(const std::string& text, const std::string& where, const std::string& what) {
  try {
    parse_hpl_dat(text, "my.dat");
    FAIL() << "expected an error mentioning " << where;
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(where), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  }
}

TEST(HplDat, ErrorsNameTheLine) {
  expect_error_at(with_line(6, "29 30 abc   Ns"), "my.dat line 6", "abc");
  expect_error_at(with_line(6, "29 30"), "my.dat line 6", "expected 4 value(s)");
  expect_error_at(with_line(5, "-1   # of N"), "my.dat line 5", "between 1 and 20");
  expect_error_at(with_line(23, "4   BCASTs"), "my.dat line 23", "not implemented");
  expect_error_at(with_line(25, "3   DEPTHs"), "my.dat line 25", "out of range");
  expect_error_at(with_line(12, "2 4    Qs"), "my.dat line 12", "expected a number for Q, got \"Qs\"");
  expect_error_at(with_line(12, "2 4"), "my.dat line 12", "expected 3 value(s)");
  expect_error_at("HPL\nonly two lines\n", "my.dat line 3", "file ends after line 2");
  expect_error_at(with_line(9, "row"), "my.dat line 9", "expected a number");
}

TEST(HplDat, OptionalTrailingLinesMayBeMissing) {
  std::string s = kNetlibDat;
  s = s.substr(0, s.find("0            L1 in"));
  HplDat d = parse_hpl_dat(s, "short.dat");
  EXPECT_EQ(d.ns.size(), 4u);
}

}  // namespace
}  // namespace qk::hpc

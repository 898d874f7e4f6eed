// The netlib HPL.dat reader (HPL_pdinfo): fixed line order, each list preceded
// by its count, values taken from the start of the line and the rest ignored
// as a comment. Every error names the file and the line.
#include <charconv>
#include <sstream>

#include "qk/base/error.h"
#include "qk/hpc/hpl.h"

namespace qk::hpc {
namespace {

constexpr int kMaxParams = 20;  // HPL_MAX_PARAM

class DatReader {
 public:
  DatReader(std::string_view text, std::string_view source) : source_(source) {
    std::string s(text);
    std::istringstream is(s);
    std::string line;
    while (std::getline(is, line)) lines_.push_back(line);
  }

  bool has(int lineno) const { return lineno <= static_cast<int>(lines_.size()); }

  std::vector<std::string> tokens(int lineno, size_t want, const char* what) const {
    QK_CHECK(has(lineno), source_, " line ", lineno, ": expected ", what,
             ", but the file ends after line ", lines_.size(),
             " (see docs/hpc.md for the HPL.dat layout)");
    std::istringstream is(lines_[lineno - 1]);
    std::vector<std::string> out;
    std::string t;
    while (out.size() < want && is >> t) out.push_back(t);
    QK_CHECK(out.size() == want, source_, " line ", lineno, ": expected ", want, " value(s) for ",
             what, ", found ", out.size(), " in \"", lines_[lineno - 1], "\"");
    return out;
  }

  template <typename T>
  T number(int lineno, const std::string& tok, const char* what) const {
    T v{};
    auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    QK_CHECK(ec == std::errc() && ptr == tok.data() + tok.size(), source_, " line ", lineno,
             ": expected a number for ", what, ", got \"", tok, "\"");
    return v;
  }

  // "count" on one line, then `count` values on the next, each in [lo, hi].
  template <typename T>
  std::vector<T> list(int count_line, const char* what, T lo, T hi) const {
    const int64_t n = number<int64_t>(count_line, tokens(count_line, 1, what)[0], what);
    QK_CHECK(n >= 1 && n <= kMaxParams, source_, " line ", count_line, ": the number of ", what,
             " must be between 1 and ", kMaxParams, ", got ", n);
    std::vector<T> out;
    for (const auto& t : tokens(count_line + 1, static_cast<size_t>(n), what)) {
      T v = number<T>(count_line + 1, t, what);
      QK_CHECK(v >= lo && v <= hi, source_, " line ", count_line + 1, ": ", what, " value ", v,
               " is out of range [", lo, ", ", hi, "]");
      out.push_back(v);
    }
    return out;
  }

  template <typename T>
  T single(int lineno, const char* what, T lo, T hi) const {
    T v = number<T>(lineno, tokens(lineno, 1, what)[0], what);
    QK_CHECK(v >= lo && v <= hi, source_, " line ", lineno, ": ", what, " value ", v,
             " is out of range [", lo, ", ", hi, "]");
    return v;
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::string> lines_;
};

std::vector<HplFact> facts(const std::vector<int>& v) {
  std::vector<HplFact> out;
  for (int x : v) out.push_back(static_cast<HplFact>(x));
  return out;
}

}  // namespace

HplDat parse_hpl_dat(std::string_view text, std::string_view source) {
  DatReader r(text, source);
  HplDat d;
  // Lines 1 and 2 are free text.
  d.out_file = r.tokens(3, 1, "the output file name")[0];
  d.device_out = r.single<int>(4, "device out (6=stdout, 7=stderr, else file)", 0, 1 << 20);
  d.ns = r.list<int64_t>(5, "problem sizes (N)", 1, int64_t(1) << 31);
  d.nbs = r.list<int>(7, "block sizes (NB)", 1, 4096);
  d.row_major = r.single<int>(9, "PMAP process mapping (0=Row-, 1=Column-major)", 0, 1) == 0;
  auto ps = r.list<int>(10, "process grids (P)", 1, 1 << 16);
  const int ngrids = static_cast<int>(ps.size());
  std::vector<int> qs;
  for (const auto& t : r.tokens(12, ps.size(), "Qs (one per P on line 11)")) {
    int q = r.number<int>(12, t, "Q");
    QK_CHECK(q >= 1, source, " line 12: Q must be >= 1, got ", q);
    qs.push_back(q);
  }
  for (int i = 0; i < ngrids; ++i) d.grids.emplace_back(ps[i], qs[i]);
  d.threshold = r.single<double>(13, "the residual threshold", 0.0, 1e300);
  d.pfacts = facts(r.list<int>(14, "panel factorizations (PFACT: 0=left, 1=Crout, 2=Right)", 0, 2));
  d.nbmins = r.list<int>(16, "recursive stopping criteria (NBMIN)", 1, 4096);
  d.ndivs = r.list<int>(18, "panels in recursion (NDIV)", 2, 64);
  d.rfacts = facts(r.list<int>(20, "recursive panel factorizations (RFACT)", 0, 2));
  auto bc = r.list<int>(22, "broadcasts (BCAST: 0=1rg, 1=1rM, 2=2rg, 3=2rM)", 0, 5);
  for (int b : bc) {
    QK_CHECK(b <= 3, source, " line 23: BCAST ", b,
             " (the 'long' broadcasts) is not implemented by qk hpl; use 0 (1ring), 1 (1rM), 2 "
             "(2ring) or 3 (2rM)");
    d.bcasts.push_back(static_cast<HplBcast>(b));
  }
  d.depths = r.list<int>(24, "look-ahead depths (DEPTH)", 0, 1);
  d.swap = r.single<int>(26, "SWAP (0=bin-exch, 1=long, 2=mix)", 0, 2);
  d.swap_threshold = r.single<int>(27, "the swapping threshold", 0, 1 << 30);
  // L1 and U storage forms, equilibration and alignment (lines 28-31) change
  // only HPL's internal layout; they are accepted when present and checked.
  if (r.has(28)) r.single<int>(28, "L1 form (0=transposed, 1=no-transposed)", 0, 1);
  if (r.has(29)) r.single<int>(29, "U form (0=transposed, 1=no-transposed)", 0, 1);
  if (r.has(30)) r.single<int>(30, "Equilibration (0=no, 1=yes)", 0, 1);
  if (r.has(31)) r.single<int>(31, "memory alignment in doubles", 1, 1 << 20);
  return d;
}

std::vector<HplParams> HplDat::runs() const {
  // The loop order of HPL_pdtest's driver.
  std::vector<HplParams> out;
  for (auto [p, q] : grids)
    for (int64_t n : ns)
      for (int nb : nbs)
        for (int depth : depths)
          for (HplBcast bc : bcasts)
            for (HplFact rf : rfacts)
              for (HplFact pf : pfacts)
                for (int nbmin : nbmins)
                  for (int ndiv : ndivs) {
                    HplParams r;
                    r.n = n, r.nb = nb, r.p = p, r.q = q, r.row_major = row_major;
                    r.threshold = threshold, r.pfact = pf, r.nbmin = nbmin, r.ndiv = ndiv;
                    r.rfact = rf, r.bcast = bc, r.depth = depth, r.swap = swap;
                    r.swap_threshold = swap_threshold;
                    out.push_back(r);
                  }
  return out;
}

}  // namespace qk::hpc

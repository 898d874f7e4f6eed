// run_hpl: one HPL test from matrix generation to PASSED/FAILED (HPL_pdtest +
// HPL_pdgesv's main loop), and the output format of HPL 2.3.
#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "hpl/grid.h"
#include "hpl/matgen.h"
#include "hpl/panel.h"
#include "hpl/solve.h"
#include "hpl/update.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"

namespace qk::hpc {
namespace {

char fact_char(HplFact f) { return f == HplFact::kLeft ? 'L' : f == HplFact::kCrout ? 'C' : 'R'; }

int64_t padded_lda(int64_t mp) {
  int64_t lda = std::max<int64_t>(1, (mp + 7) / 8 * 8);
  if (lda % 512 == 0) lda += 8;  // avoid cache-set aliasing of columns
  return lda;
}

// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

void validate(const HplParams& p) {
  QK_CHECK(p.n >= 1, "HPL: expected N >= 1, got ", p.n);
  QK_CHECK(p.nb >= 1, "HPL: expected NB >= 1, got ", p.nb);
  QK_CHECK(p.depth == 0 || p.depth == 1, "HPL: look-ahead DEPTH must be 0 or 1, got ", p.depth);
  QK_CHECK(p.nbmin >= 1, "HPL: expected NBMIN >= 1, got ", p.nbmin);
  QK_CHECK(p.ndiv >= 2, "HPL: expected NDIV >= 2, got ", p.ndiv);
  QK_CHECK(p.n <= (int64_t(1) << 31) - 2, "HPL: N = ", p.n, " is beyond 32-bit BLAS indexing");
}

double hpl_flops(int64_t n) {
  const double d = static_cast<double>(n);
  return 2.0 / 3.0 * d * d * d + 1.5 * d * d;
}

}  // namespace

std::string hpl_tv(const HplParams& p) {
  return fmt::format("W{}{}{}{}{}{}{}", p.row_major ? 'R' : 'C', p.depth,
                     static_cast<int>(p.bcast), fact_char(p.rfact), p.ndiv, fact_char(p.pfact),
                     p.nbmin);
}

int64_t hpl_bytes_per_rank(const HplParams& p, int myrow, int mycol) {
  const int64_t mp = hpl::numroc(p.n, p.nb, myrow, p.p);
  const int64_t nq = hpl::numroc(p.n + 1, p.nb, mycol, p.q);
  int64_t doubles = padded_lda(mp) * nq;             // [A | b]
  doubles += 2 * (int64_t(p.nb) * p.nb + p.nb + mp * p.nb);  // two panels (look-ahead)
  if (p.p > 1) doubles += 2 * int64_t(p.nb) * nq;    // swap slots
  doubles += mp * p.nb + 2 * mp + 2 * p.n;           // check and solve work
  return doubles * static_cast<int64_t>(sizeof(double));
}

HplResult run_hpl(const Comm& world, const HplParams& p, const HplOptions& opt) {
  using namespace hpl;
  validate(p);
  Grid g = make_grid(world, p.p, p.q, p.row_major);

  // Refuse sizes that cannot fit before allocating anything; all ranks agree.
  const int64_t need = hpl_bytes_per_rank(p, g.myrow, g.mycol);
  const int node_ranks = ranks_on_this_node(world);
  const int64_t avail = available_memory();
  const int64_t limit = static_cast<int64_t>(opt.memory_fraction * static_cast<double>(avail));
  const int64_t too_big = world.allreduce_max(int64_t(avail > 0 && need * node_ranks > limit));
  QK_CHECK(!too_big, "HPL: N = ", p.n, " needs about ", format_bytes(need), " per rank (",
           format_bytes(need * node_ranks), " for the ", node_ranks,
           " rank(s) on this node), but only ", format_bytes(avail),
           " is available; the matrix takes 8 N^2 bytes in all, so choose a smaller N (about ",
           static_cast<int64_t>(std::sqrt(opt.memory_fraction * avail * p.p * p.q /
                                          (8.0 * node_ranks))),
           " at most here) or use more nodes");

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(opt.blas_threads > 0 ? opt.blas_threads
                                                : std::max(1, hw / std::max(1, node_ranks)));

  LocalMatrix a;
  a.n = p.n;
  a.nb = p.nb;
  a.mp = numroc(p.n, p.nb, g.myrow, g.nprow);
  a.nq = numroc(p.n + 1, p.nb, g.mycol, g.npcol);
  a.lda = padded_lda(a.mp);
  a.storage.assign(static_cast<size_t>(a.lda * std::max<int64_t>(a.nq, 1)), 0.0);
  a.a = a.storage.data();
  generate_local_columns(g, p.n, p.nb, kHplSeed, 0, a.nq, a.a, a.lda);

  bool inject = opt.inject_fault && world.rank() == 0;
  world.barrier();
  const double t0 = MPI_Wtime();
  double last_progress = t0;

  Panel pan[2];
  UpdateWork work;
  const int64_t nblocks = (p.n + p.nb - 1) / p.nb;
  panel_init(pan[0], g, a, 0);
  if (g.mycol == pan[0].pcol) {
    panel_factor(pan[0], g, a, p);
    panel_bcast_start(pan[0], g, p.bcast);
  }
  int cur = 0;
  // The trailing update runs in slices of columns; between slices both ends of
  // the panel broadcasts make progress (Note [panel broadcast]).
  const int64_t slice = std::max<int64_t>(256, 2 * int64_t(p.nb));
  auto update = [&](Panel& pc, Panel* pn, int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; c += slice) {
      panel_update(pc, g, a, c, std::min(hi, c + slice), work, &inject);
      if (pn) panel_bcast_progress(*pn, g, p.bcast);
      panel_bcast_progress(pc, g, p.bcast);
    }
  };
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    Panel& pc = pan[cur];
    Panel& pn = pan[1 - cur];
    panel_bcast_finish(pc, g, p.bcast);
    const int64_t k = pc.k;
    const int64_t jt = local_before(k + pc.jb, p.nb, g.mycol, g.npcol);  // first trailing column
    const bool has_next = blk + 1 < nblocks;
    if (has_next) {
      panel_bcast_wait_sends(pn);
      panel_init(pn, g, a, k + pc.jb);
      panel_bcast_post(pn, g, p.bcast);
    }
    Panel* next = has_next ? &pn : nullptr;
    const bool owns_next = has_next && g.mycol == pn.pcol;
    if (p.depth >= 1 && owns_next) {
      // Look-ahead: bring the next panel up to date, factor and send it, and
      // only then update the rest, so its broadcast overlaps this update.
      panel_update(pc, g, a, pn.jj, pn.jj + pn.jb, work, &inject);
      panel_factor(pn, g, a, p);
      panel_bcast_start(pn, g, p.bcast);
      update(pc, next, pn.jj + pn.jb, a.nq);
    } else {
      update(pc, next, jt, a.nq);
      if (owns_next) {
        panel_factor(pn, g, a, p);
        panel_bcast_start(pn, g, p.bcast);
      }
    }
    cur = 1 - cur;
    if (world.rank() == 0 && opt.progress_seconds > 0) {
      const double now = MPI_Wtime();
      if (now - last_progress >= opt.progress_seconds) {
        last_progress = now;
        const double done = 1.0 - std::pow(double(p.n - k - pc.jb) / double(p.n), 3.0);
        const double el = now - t0;
        std::fprintf(stderr,
                     "qk hpl: N=%lld column %lld/%lld, %.0f%% of the flops in %.1f s, "
                     "%.2f Gflops so far, about %.0f s left\n",
                     static_cast<long long>(p.n), static_cast<long long>(k + pc.jb),
                     static_cast<long long>(p.n), 100.0 * done, el,
                     done * hpl_flops(p.n) / el / 1e9, done > 0 ? el * (1 - done) / done : 0.0);
      }
    }
  }
  panel_bcast_wait_sends(pan[0]);
  panel_bcast_wait_sends(pan[1]);

  HplResult res;
  res.x = back_substitute(g, world, a);
  const double t1 = MPI_Wtime();
  res.seconds = world.allreduce_max(t1 - t0);
  res.gflops = hpl_flops(p.n) / res.seconds / 1e9;
  res.tv = hpl_tv(p);
  a.storage.clear();
  a.storage.shrink_to_fit();

  const Residual r = check_residual(g, world, p.n, p.nb, res.x);
  res.resid_norm = r.resid;
  res.norm_a = r.norm_a;
  res.norm_x = r.norm_x;
  res.norm_b = r.norm_b;
  res.scaled_residual = r.scaled;
  res.passed = r.scaled < p.threshold;
  return res;
}

std::string format_hpl_header() {
  return fmt::format("{}\nT/V                N    NB     P     Q               Time                 "
                     "Gflops\n{}\n",
                     std::string(80, '='), std::string(80, '-'));
}

std::string format_hpl_result(const HplParams& p, const HplResult& r) {
  return fmt::format(
      "{:<10}{:>10} {:>5} {:>5} {:>5} {:>18.2f} {:>18.4e}\n{}\n"
      "||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)= {:16.8e} ...... {}\n",
      r.tv, p.n, p.nb, p.p, p.q, r.seconds, r.gflops, std::string(80, '-'), r.scaled_residual,
      r.passed ? "PASSED" : "FAILED");
}

}  // namespace qk::hpc

// The optimized kernels: the reference's algorithm (lexicographic symmetric
// Gauss-Seidel, the same V-cycle and CG), laid out for SIMD, threads and fewer
// passes over memory.
//  - The 27-point structure is exploited (Note [line stencil] in problem.cc):
//    inner points of a line read their neighbours at fixed offsets, with the
//    line's values stored slot-major, so there are no column indices to load
//    (8 instead of 12 bytes per nonzero) and every loop over x vectorizes.
//    Points on the faces of the local box use the general 27-slot rows.
//  - SymGS (Note [line pipeline]): per line, everything that does not depend
//    on the point just updated (24 or 25 of the 27 terms) is one vectorized
//    pass; only the x-1 (forward) or x+1 (backward) term remains in the
//    sequential recurrence. Threads own bands of y and sweep plane after plane
//    as a pipeline, synchronized point to point, not by barriers. The update
//    order is the lexicographic one, so each row sees exactly the reference's
//    old and new values; only the summation order inside a row differs
//    (round-off).
//  - The multigrid residual is computed only at the coarse points the
//    restriction reads (1/8 of the rows) instead of a full SpMV.
//  - p . Ap is fused into the SpMV, and x += alpha p, r -= alpha Ap, r . r into
//    one pass.
//  - Dot products sum fixed per-thread chunks (deterministic, but ordered
//    differently from the serial loop: results agree to round-off).
#include <immintrin.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "hpcg/kernels.h"
#include "qk/base/thread_pool.h"

namespace qk::hpc::hpcg {
namespace {

// Rows per task of the threaded kernels (--threads > 1): not measured.
constexpr int64_t kGrain = 4096;
constexpr int kLeft = 12, kSelf = 13, kRight = 14;  // slots of x-1, x, x+1

// The general row (faces of the local box): all 27 slots, padding is
// (own column, 0.0), which adds an exact zero.
inline double row_dot(const Level& a, const double* x, int64_t i) {
  const double* v = &a.vals[i * kSlots];
  const int32_t* c = &a.cols[i * kSlots];
  double sum = 0.0;
  for (int j = 0; j < kSlots; ++j) sum += v[j] * x[c[j]];
  return sum;
}

inline void gs_row(const Level& a, const double* r, double* x, int64_t i) {
  const double* v = &a.vals[i * kSlots];
  const int32_t* c = &a.cols[i * kSlots];
  const double d = a.diag[i];
  double sum = r[i];
  for (int j = 0; j < kSlots; ++j) sum -= v[j] * x[c[j]];
  sum += x[i] * d;
  x[i] = sum / d;
}

// Four doubles, loaded and stored unaligned (AVX2 or half an AVX-512 register).
typedef double V4 __attribute__((vector_size(32), aligned(8)));
// Points per register block (4 x V4). With the line-stencil storage the
// blocks made `qk hpcg` 2.61x the reference path (docs/benchmarks.md, HPC,
// 2-core development VM); 16 against other widths was not measured.
constexpr int64_t kBlock = 16;

// For points lo <= ix < hi of line l (in a fixed-offset mode):
//   kGs:  out[ix] = (r[i] - sum over slots except skip1, skip2 of v x) / diag
//   else: out[ix] = sum over all slots of v x (the reference's slot order)
// A block of 16 consecutive points keeps its sums in registers across the
// slots; the last block is shifted back to end at hi (recomputing a few
// points the same way), so every block is full.
template <bool kGs, int kSkip1, int kSkip2>
inline void line_terms(const Level& a, int64_t l, int64_t lo, int64_t hi, const double* r,
                       const double* x, double* out) {
  const int64_t nx = a.geo.nx, base = l * nx;
  const double* lv = &a.line_vals[l * kSlots * nx];
  if (hi - lo < kBlock) {
    for (int64_t ix = lo; ix < hi; ++ix) {
      double acc = kGs ? r[base + ix] : 0.0;
      for (int s = 0; s < kSlots; ++s) {
        if (s == kSkip1 || s == kSkip2) continue;
        const double t = lv[s * nx + ix] * x[base + ix + a.offsets[s]];
        if (kGs) acc -= t; else acc += t;
      }
      out[ix] = kGs ? acc * a.inv_diag[base + ix] : acc;
    }
    return;
  }
  for (int64_t x0 = lo;; x0 += kBlock) {
    if (x0 + kBlock > hi) x0 = hi - kBlock;
    V4 acc[4];
    for (int k = 0; k < 4; ++k)
      acc[k] = kGs ? *reinterpret_cast<const V4*>(r + base + x0 + 4 * k) : V4{0, 0, 0, 0};
#pragma GCC unroll 27
    for (int s = 0; s < kSlots; ++s) {
      if (s == kSkip1 || s == kSkip2) continue;
      const double* v = lv + s * nx + x0;
      const double* xs = x + base + x0 + a.offsets[s];
      for (int k = 0; k < 4; ++k) {
        const V4 t = *reinterpret_cast<const V4*>(v + 4 * k) *
                     *reinterpret_cast<const V4*>(xs + 4 * k);
        if (kGs) acc[k] -= t; else acc[k] += t;
      }
    }
    for (int k = 0; k < 4; ++k) {
      if (kGs) acc[k] *= *reinterpret_cast<const V4*>(&a.inv_diag[base + x0 + 4 * k]);
      *reinterpret_cast<V4*>(out + x0 + 4 * k) = acc[k];
    }
    if (x0 + kBlock == hi) break;
  }
}

// y = A x on line l.
inline void spmv_line(const Level& a, const double* x, double* y, int64_t l) {
  const int64_t nx = a.geo.nx, base = l * nx;
  switch (a.line_mode[l]) {
    case kLineFull:
      line_terms<false, -1, -1>(a, l, 0, nx, nullptr, x, y + base);
      return;
    case kLineInner:
      y[base] = row_dot(a, x, base);
      line_terms<false, -1, -1>(a, l, 1, nx - 1, nullptr, x, y + base);
      y[base + nx - 1] = row_dot(a, x, base + nx - 1);
      return;
    default:
      for (int64_t ix = 0; ix < nx; ++ix) y[base + ix] = row_dot(a, x, base + ix);
  }
}

// Forward Gauss-Seidel on line l (increasing x); t: nx doubles of scratch.
// Everything but the x-1 term is one vectorized pass (the other lines and
// x+1 hold their values while the line is swept); what is left is the
// recurrence x_i = t_i - (a_left / diag)_i x_{i-1}, one FMA per point.
inline void gs_line_forward(const Level& a, const double* r, double* x, int64_t l, double* t) {
  const int64_t nx = a.geo.nx, base = l * nx;
  const int mode = a.line_mode[l];
  if (mode == kLineGeneral) {
    for (int64_t ix = 0; ix < nx; ++ix) gs_row(a, r, x, base + ix);
    return;
  }
  const int64_t lo = mode == kLineFull ? 0 : 1, hi = mode == kLineFull ? nx : nx - 1;
  if (lo) gs_row(a, r, x, base);
  line_terms<true, kLeft, kSelf>(a, l, lo, hi, r, x, t);
  const double* c = &a.left_over_diag[base];
  double* xl = x + base;
  double prev = xl[lo - 1];  // x - 1 of the first point: its coefficient is 0 in a full line
  for (int64_t ix = lo; ix < hi; ++ix) {
    prev = t[ix] - c[ix] * prev;
    xl[ix] = prev;
  }
  if (hi < nx) gs_row(a, r, x, base + nx - 1);
}

// Backward Gauss-Seidel on line l (decreasing x).
inline void gs_line_backward(const Level& a, const double* r, double* x, int64_t l, double* t) {
  const int64_t nx = a.geo.nx, base = l * nx;
  const int mode = a.line_mode[l];
  if (mode == kLineGeneral) {
    for (int64_t ix = nx - 1; ix >= 0; --ix) gs_row(a, r, x, base + ix);
    return;
  }
  const int64_t lo = mode == kLineFull ? 0 : 1, hi = mode == kLineFull ? nx : nx - 1;
  if (hi < nx) gs_row(a, r, x, base + nx - 1);
  line_terms<true, kSelf, kRight>(a, l, lo, hi, r, x, t);
  const double* c = &a.right_over_diag[base];
  double* xl = x + base;
  double next = xl[hi];
  for (int64_t ix = hi - 1; ix >= lo; --ix) {
    next = t[ix] - c[ix] * next;
    xl[ix] = next;
  }
  if (lo) gs_row(a, r, x, base);
}

// Sums f(lo, hi) over fixed chunks of [0, n), one per thread, in chunk order.
template <typename F>
double chunked_sum(int64_t n, int64_t grain, F&& f) {
  const int nt = std::max(1, std::min<int>(num_threads(), static_cast<int>(n / grain) + 1));
  std::vector<double> part(nt, 0.0);
  parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) part[t] = f(n * t / nt, n * (t + 1) / nt);
  });
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

// Spins briefly, then yields, so an oversubscribed machine still progresses.
template <typename Ready>
void spin_until(Ready&& ready) {
  for (int spins = 0; !ready(); ++spins) {
    if (spins < 4000)
      _mm_pause();
    else
      std::this_thread::yield();
  }
}

struct alignas(64) Counter {
  std::atomic<int64_t> v{0};
};

// Runs body(t, nt) on nt threads at once (one pool dispatch). The pool makes
// min(nt, pool size) chunks of one t each; a chunk that waits for another can
// only finish after it, so each runs on its own thread and waits cannot
// deadlock as long as nt <= num_threads().
template <typename F>
void run_team(int nt, F&& body) {
  if (nt <= 1) {
    body(0, 1);
    return;
  }
  parallel_for(0, nt, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) body(static_cast<int>(t), nt);
  });
}

class OptimizedKernels final : public Kernels {
 public:
  using Kernels::Kernels;

  void spmv(Level& a, double* x, double* y) override {
    const double t0 = MPI_Wtime();
    exchange_halo(a, world_, x);
    const int64_t nlines = nlines_of(a);
    parallel_for(0, nlines, line_grain(a), [&](int64_t lo, int64_t hi) {
      for (int64_t l = lo; l < hi; ++l) spmv_line(a, x, y, l);
    });
    times.spmv += MPI_Wtime() - t0;
  }

  double spmv_dot(Level& a, double* p, double* ap) override {
    const double t0 = MPI_Wtime();
    exchange_halo(a, world_, p);
    const int64_t nx = a.geo.nx;
    double s = chunked_sum(nlines_of(a), line_grain(a), [&](int64_t lo, int64_t hi) {
      double acc = 0.0;
      for (int64_t l = lo; l < hi; ++l) {
        spmv_line(a, p, ap, l);
        for (int64_t i = l * nx; i < (l + 1) * nx; ++i) acc += p[i] * ap[i];  // still in L1
      }
      return acc;
    });
    s = world_.allreduce_sum(s);
    times.spmv += MPI_Wtime() - t0;
    return s;
  }

  // Note [line pipeline]: thread t owns the lines with y in [y0, y1) of every
  // plane and sweeps them in lexicographic order. In the forward sweep, line
  // (z, y) reads the new values of (z, y - 1) and of plane z - 1, and the old
  // values of (z, y + 1) and plane z + 1. Across a band edge that means: the
  // first line of a band waits until the band below has finished the line
  // under it in the same plane, and the last line of a band waits until the
  // band above has finished its first line of the previous plane (which, in
  // turn, must not be overwritten earlier: the band above waits for us
  // symmetrically). Each thread publishes the index of its last finished line;
  // the backward sweep mirrors all of it. So the threads see the reference's
  // values with one wait per plane instead of a barrier per wavefront.
  void symgs(Level& a, const double* r, double* x) override {
    exchange_halo(a, world_, x);
    const int64_t nx = a.geo.nx, ny = a.geo.ny, nz = a.geo.nz, nlines = ny * nz;
    int nt = in_parallel_region() ? 1 : num_threads();
    // Small levels are not worth sharing; each band needs at least two lines.
    if (a.nrow < 8192) nt = 1;
    nt = static_cast<int>(std::min<int64_t>(nt, ny / 2));
    if (nt <= 1) {
      std::vector<double> t(nx);
      for (int64_t l = 0; l < nlines; ++l) gs_line_forward(a, r, x, l, t.data());
      for (int64_t l = nlines - 1; l >= 0; --l) gs_line_backward(a, r, x, l, t.data());
      return;
    }
    std::vector<Counter> fwd(nt), bwd(nt);
    std::atomic<int> forward_done{0};
    run_team(nt, [&](int t, int n) {
      std::vector<double> tmp(nx);
      const int64_t y0 = ny * t / n, y1 = ny * (t + 1) / n;
      auto done = [](const Counter& c, int64_t v) {
        spin_until([&] { return c.v.load(std::memory_order_acquire) >= v; });
      };
      for (int64_t z = 0; z < nz; ++z)
        for (int64_t y = y0; y < y1; ++y) {
          if (y == y0 && t > 0) done(fwd[t - 1], z * ny + y0);  // (z, y0 - 1) finished
          if (y == y1 - 1 && t + 1 < n && z > 0) done(fwd[t + 1], (z - 1) * ny + y1 + 1);
          gs_line_forward(a, r, x, y + ny * z, tmp.data());
          fwd[t].v.store(z * ny + y + 1, std::memory_order_release);
        }
      // The backward sweep starts at the top, which needs every band's forward
      // values nearby; one barrier is simplest.
      forward_done.fetch_add(1, std::memory_order_acq_rel);
      spin_until([&] { return forward_done.load(std::memory_order_acquire) == n; });
      auto bidx = [&](int64_t z, int64_t y) { return (nz - 1 - z) * ny + (ny - 1 - y); };
      for (int64_t z = nz - 1; z >= 0; --z)
        for (int64_t y = y1 - 1; y >= y0; --y) {
          if (y == y1 - 1 && t + 1 < n) done(bwd[t + 1], bidx(z, y1) + 1);
          if (y == y0 && t > 0 && z + 1 < nz) done(bwd[t - 1], bidx(z + 1, y0 - 1) + 1);
          gs_line_backward(a, r, x, y + ny * z, tmp.data());
          bwd[t].v.store(bidx(z, y) + 1, std::memory_order_release);
        }
    });
  }

  double dot(int64_t n, const double* x, const double* y) override {
    const double t0 = MPI_Wtime();
    double s = chunked_sum(n, kGrain, [&](int64_t lo, int64_t hi) {
      double acc = 0.0;
      for (int64_t i = lo; i < hi; ++i) acc += x[i] * y[i];
      return acc;
    });
    s = world_.allreduce_sum(s);
    times.dot += MPI_Wtime() - t0;
    return s;
  }

  void waxpby(int64_t n, double alpha, const double* x, double beta, const double* y,
              double* w) override {
    const double t0 = MPI_Wtime();
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
      if (alpha == 1.0)
        for (int64_t i = lo; i < hi; ++i) w[i] = x[i] + beta * y[i];
      else
        for (int64_t i = lo; i < hi; ++i) w[i] = alpha * x[i] + beta * y[i];
    });
    times.waxpby += MPI_Wtime() - t0;
  }

  double update_xr(int64_t n, double alpha, const double* p, const double* ap, double* x,
                   double* r) override {
    const double t0 = MPI_Wtime();
    double s = chunked_sum(n, kGrain, [&](int64_t lo, int64_t hi) {
      double acc = 0.0;
      for (int64_t i = lo; i < hi; ++i) {
        x[i] = x[i] + alpha * p[i];
        const double ri = r[i] + -alpha * ap[i];
        r[i] = ri;
        acc += ri * ri;
      }
      return acc;
    });
    s = world_.allreduce_sum(s);
    times.waxpby += MPI_Wtime() - t0;
    return s;
  }

 protected:
  void residual_restrict(Level& a, const double* r, double* x) override {
    exchange_halo(a, world_, x);
    const int64_t nc = static_cast<int64_t>(a.f2c.size());
    const int64_t nx = a.geo.nx;
    parallel_for(0, nc, kGrain / 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t f = a.f2c[i];
        const int64_t l = f / nx, ix = f % nx;
        double sum = 0.0;
        const int mode = a.line_mode[l];
        if (mode == kLineFull || (mode == kLineInner && ix > 0 && ix < nx - 1)) {
          const double* lv = &a.line_vals[l * kSlots * nx + ix];
          for (int s = 0; s < kSlots; ++s) sum += lv[s * nx] * x[f + a.offsets[s]];
        } else {
          sum = row_dot(a, x, f);
        }
        a.rc[i] = r[f] - sum;
      }
    });
  }

 private:
  static int64_t nlines_of(const Level& a) { return int64_t(a.geo.ny) * a.geo.nz; }
  static int64_t line_grain(const Level& a) { return std::max<int64_t>(1, kGrain / a.geo.nx); }
};

}  // namespace

std::unique_ptr<Kernels> make_optimized_kernels(const Comm& world) {
  return std::make_unique<OptimizedKernels>(world);
}

}  // namespace qk::hpc::hpcg

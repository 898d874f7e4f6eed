// The optimized kernels: the same arithmetic per row as the reference, laid
// out for threads and fewer passes over memory.
//  - SymGS runs the line wavefront (Note [line wavefront] in problem.cc): the
//    x-lines of one wavefront are independent, so threads take whole lines and
//    each row's update is the reference's, bit for bit.
//  - Rows use all 27 slots (padding is (own column, 0.0), which subtracts an
//    exact zero), a fixed trip count the compiler unrolls.
//  - The multigrid residual is computed only at the coarse points the
//    restriction reads (1/8 of the rows) instead of a full SpMV.
//  - p . Ap is fused into the SpMV, and x += alpha p, r -= alpha Ap, r . r into
//    one pass.
//  - Dot products sum fixed per-thread chunks (deterministic, but ordered
//    differently from the serial loop: results agree to round-off).
#include <immintrin.h>
#include <mpi.h>

#include <atomic>
#include <thread>
#include <vector>

#include "hpc/hpcg/kernels.h"
#include "qk/base/thread_pool.h"

namespace qk::hpc::hpcg {
namespace {

constexpr int64_t kGrain = 4096;

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

// Sums f(lo, hi) over fixed chunks, one per thread, in chunk order.
template <typename F>
double chunked_sum(int64_t n, F&& f) {
  const int nt = std::max(1, std::min<int>(num_threads(), static_cast<int>(n / kGrain) + 1));
  std::vector<double> part(nt, 0.0);
  parallel_for(0, nt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) part[t] = f(n * t / nt, n * (t + 1) / nt);
  });
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

// A sense-reversing barrier for a team that is all running at once: spins
// briefly (wavefronts are short), then yields so an oversubscribed machine
// still makes progress.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spins < 2000) _mm_pause();
      else std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> gen_{0};
};

// Runs body(t, nt) on nt threads at once (one pool dispatch). Each chunk of the
// pool's parallel_for holds exactly one t, so every t has its own thread and
// barriers inside `body` cannot deadlock.
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
    parallel_for(0, a.nrow, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) y[i] = row_dot(a, x, i);
    });
    times.spmv += MPI_Wtime() - t0;
  }

  double spmv_dot(Level& a, double* p, double* ap) override {
    const double t0 = MPI_Wtime();
    exchange_halo(a, world_, p);
    double s = chunked_sum(a.nrow, [&](int64_t lo, int64_t hi) {
      double acc = 0.0;
      for (int64_t i = lo; i < hi; ++i) {
        const double v = row_dot(a, p, i);
        ap[i] = v;
        acc += p[i] * v;
      }
      return acc;
    });
    s = world_.allreduce_sum(s);
    times.spmv += MPI_Wtime() - t0;
    return s;
  }

  void symgs(Level& a, const double* r, double* x) override {
    exchange_halo(a, world_, x);
    const int nx = a.geo.nx;
    const int nw = static_cast<int>(a.wf_ptr.size()) - 1;
    // Coarse levels have too few rows per wavefront to share.
    const int64_t max_lines = int64_t(a.geo.nz) / 2 + 1;
    int nt = in_parallel_region() ? 1 : num_threads();
    if (max_lines * nx < 256) nt = 1;
    if (nt == 1) {
      // Alone, the lexicographic order streams through memory best.
      for (int64_t i = 0; i < a.nrow; ++i) gs_row(a, r, x, i);
      for (int64_t i = a.nrow - 1; i >= 0; --i) gs_row(a, r, x, i);
      return;
    }
    SpinBarrier barrier(nt);
    run_team(nt, [&](int t, int n) {
      // Each thread takes a contiguous share of every wavefront's lines.
      auto share = [&](int w, int64_t* lo, int64_t* hi) {
        const int64_t b = a.wf_ptr[w], e = a.wf_ptr[w + 1];
        *lo = b + (e - b) * t / n;
        *hi = b + (e - b) * (t + 1) / n;
      };
      for (int w = 0; w < nw; ++w) {
        int64_t lo, hi;
        share(w, &lo, &hi);
        for (int64_t l = lo; l < hi; ++l) {
          const int64_t base = a.wf_lines[l];
          for (int ix = 0; ix < nx; ++ix) gs_row(a, r, x, base + ix);
        }
        if (n > 1) barrier.wait();
      }
      for (int w = nw - 1; w >= 0; --w) {
        int64_t lo, hi;
        share(w, &lo, &hi);
        for (int64_t l = hi - 1; l >= lo; --l) {
          const int64_t base = a.wf_lines[l];
          for (int ix = nx - 1; ix >= 0; --ix) gs_row(a, r, x, base + ix);
        }
        if (n > 1) barrier.wait();
      }
    });
  }

  double dot(int64_t n, const double* x, const double* y) override {
    const double t0 = MPI_Wtime();
    double s = chunked_sum(n, [&](int64_t lo, int64_t hi) {
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
    double s = chunked_sum(n, [&](int64_t lo, int64_t hi) {
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
    parallel_for(0, nc, kGrain / 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t f = a.f2c[i];
        a.rc[i] = r[f] - row_dot(a, x, f);
      }
    });
  }
};

}  // namespace

std::unique_ptr<Kernels> make_optimized_kernels(const Comm& world) {
  return std::make_unique<OptimizedKernels>(world);
}

}  // namespace qk::hpc::hpcg

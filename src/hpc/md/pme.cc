#include "pme.h"

#include "fftw_planning.h"
#include "pme_gpu_device.h"

#include <fftw3.h>

#include <algorithm>
#include <mutex>
#include <cmath>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"

namespace qk::md {

double ewald_coefficient(double rc, double rtol) {
  // As GROMACS: double beta until erfc(beta rc) <= rtol, then bisect 60 more times.
  double beta = 5, low = 0, high;
  int i = 0;
  do {
    ++i;
    beta *= 2;
  } while (std::erfc(beta * rc) > rtol);
  high = beta;
  for (int k = 0; k < i + 60; ++k) {
    beta = (low + high) / 2;
    if (std::erfc(beta * rc) > rtol) {
      low = beta;
    } else {
      high = beta;
    }
  }
  return beta;
}

std::array<int, 3> pme_grid_size(const Vec3& box, double spacing, int order) {
  // GROMACS's lists (fft/calcgrid.cpp): sizes FFTW does fast; above 44, these times powers of two.
  static constexpr int kInit[] = {6, 8, 10, 12, 14, 16, 20, 24, 25, 28, 32, 36, 40, 42, 44};
  static constexpr int kBase[] = {45, 48, 50, 52, 54, 56, 60, 64, 70, 72, 75, 80, 81, 84};
  QK_CHECK(spacing > 0, "fourierspacing must be positive, got ", spacing);
  std::array<int, 3> n{};
  for (int d = 0; d < 3; ++d) {
    int nmin = std::max(static_cast<int>(box[d] / spacing + 0.999), 2 * (order - 1));
    if (kInit[std::size(kInit) - 1] >= nmin) {
      n[d] = *std::find_if(std::begin(kInit), std::end(kInit), [&](int g) { return g >= nmin; });
      continue;
    }
    int fac2 = 1;
    while (fac2 * kBase[std::size(kBase) - 1] < nmin) fac2 *= 2;
    // The smallest multiple of 4 (90 allowed, 140 not) of fac2 x base that is >= nmin; GROMACS scans i > 0 only.
    for (int i = static_cast<int>(std::size(kBase)) - 1; i > 0; --i) {
      int attempt = fac2 * kBase[i];
      if (((attempt % 4 == 0 && attempt != 140) || attempt == 90) && attempt >= nmin) n[d] = attempt;
    }
  }
  return n;
}

namespace {

// The order-n B-spline weights of grid points i0 .. i0+n-1 for fraction f (GROMACS's make_bsplines)
// and their derivatives with respect to the grid coordinate.
// kOrder > 0 fixes n at compile time: the loops unroll and each 1/(k - 1) becomes a constant, with the
// general form's formulas.
template <int kOrder>
void bspline_of(double f, int order, double* theta, double* dtheta) {
  const int n = kOrder > 0 ? kOrder : order;
  double* data = theta;
  data[n - 1] = 0;
  data[1] = f;
  data[0] = 1 - f;
  for (int k = 3; k < n; ++k) {
    const double div = 1.0 / (k - 1.0);
    data[k - 1] = div * f * data[k - 2];
    for (int l = 1; l < k - 1; ++l) data[k - l - 1] = div * ((f + l) * data[k - l - 2] + (k - l - f) * data[k - l - 1]);
    data[0] = div * (1 - f) * data[0];
  }
  dtheta[0] = -data[0];
  for (int k = 1; k < n; ++k) dtheta[k] = data[k - 1] - data[k];
  const double div = 1.0 / (n - 1);
  data[n - 1] = div * f * data[n - 2];
  for (int l = 1; l < n - 1; ++l) data[n - l - 1] = div * ((f + l) * data[n - l - 2] + (n - l - f) * data[n - l - 1]);
  data[0] = div * (1 - f) * data[0];
}

void bspline(double f, int n, double* theta, double* dtheta) {
  if (n == 4) return bspline_of<4>(f, n, theta, dtheta);  // GROMACS's default pme-order
  bspline_of<0>(f, n, theta, dtheta);
}

}  // namespace

struct Pme::Plans {
  std::vector<double> grid;  // nx * ny * nz, z fastest: the FFT's input and output
  // Per spreading thread, a grid padded by order - 1 points in each dimension, so that an atom's order^3
  // points are contiguous runs (no wrapping per point); folded and summed into grid afterwards. After the
  // backward FFT, padded[0] holds the potential in the same padded layout for the gather.
  std::vector<std::vector<double>> padded;
  std::vector<std::array<int, 3>> first;  // per atom, its first grid point per dimension
  std::vector<double> theta, dtheta;      // per atom and dimension, order spline weights and derivatives
  std::vector<double> eterm;  // per k-space point: exp(-pi^2 m^2 / beta^2) / (pi V m^2 B(m)) times f; 0 at m = 0
  // eterm at a rank's k-space lines in PmeSlabFft's layout ([ky][kz][kx]), for ky in [lines_ky0, lines_ky1)
  std::vector<double> eterm_lines;
  int lines_ky0 = 0, lines_ky1 = -1;  // none yet (a new box empties it)
  std::vector<char> touched;          // per x-plane: whether this rank's atoms spread onto it
  fftw_complex* kspace = nullptr;  // nx * ny * (nz/2 + 1)
  fftw_plan forward = nullptr, backward = nullptr;
  ~Plans() {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    if (forward) fftw_destroy_plan(forward);
    if (backward) fftw_destroy_plan(backward);
    if (kspace) fftw_free(kspace);
  }
};

Pme::Pme(const Vec3& box, std::array<int, 3> grid, int order, double beta, double epsilon_r)
    : box_(box), n_(grid), order_(order), beta_(beta), coulomb_factor_(units::kCoulombFactor / epsilon_r) {
  for (int d = 0; d < 3; ++d)
    QK_CHECK(n_[d] >= order_, "PME grid ", n_[0], "x", n_[1], "x", n_[2], " is smaller than pme-order ", order_);
  // B-spline moduli (GROMACS's make_bspline_moduli): the spline at integer points, Fourier transformed.
  std::vector<double> at_integers(order_), unused(order_);
  bspline(0.0, order_, at_integers.data(), unused.data());
  for (int d = 0; d < 3; ++d) {
    const int n = n_[d];
    std::vector<double>& mod = bsp_mod_[d];
    mod.assign(n, 0);
    for (int m = 0; m < n; ++m) {
      double sc = 0, ss = 0;
      for (int k = 0; k < order_; ++k) {
        const double arg = 2 * units::kPi * m * (k + 1) / n;
        sc += at_integers[k] * std::cos(arg);
        ss += at_integers[k] * std::sin(arg);
      }
      mod[m] = sc * sc + ss * ss;
    }
    // Even spline orders on even grids have a zero at n/2: GROMACS averages its neighbours.
    for (int m = 0; m < n; ++m)
      if (mod[m] < 1e-7) mod[m] = 0.5 * (mod[(m - 1 + n) % n] + mod[(m + 1) % n]);
  }
  plans_ = std::make_unique<Plans>();
  const size_t nreal = static_cast<size_t>(n_[0]) * n_[1] * n_[2];
  const size_t ncomplex = static_cast<size_t>(n_[0]) * n_[1] * (n_[2] / 2 + 1);
  plans_->grid.assign(nreal, 0);
  plans_->kspace = fftw_alloc_complex(ncomplex);
  plans_->eterm.assign(ncomplex, 0.0);
  set_box(box);
  QK_CHECK(plans_->kspace != nullptr, "PME: cannot allocate the ", ncomplex, "-point complex grid");
  // Planned once (FFTW's planner is not thread-safe and costs more than the transforms at these sizes).
  const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  plan_on_pool_threads();
  plans_->forward = fftw_plan_dft_r2c_3d(n_[0], n_[1], n_[2], plans_->grid.data(), plans_->kspace, FFTW_ESTIMATE);
  plans_->backward = fftw_plan_dft_c2r_3d(n_[0], n_[1], n_[2], plans_->kspace, plans_->grid.data(), FFTW_ESTIMATE);
  QK_CHECK(plans_->forward && plans_->backward, "PME: FFTW could not plan a ", n_[0], "x", n_[1], "x", n_[2],
           " transform");
}

// The influence function follows the box (kept per box: pressure coupling changes it every nstpcouple steps).
void Pme::set_box(const Vec3& box) {
  box_ = RectBox(box);
  std::fill(plans_->eterm.begin(), plans_->eterm.end(), 0.0);
  plans_->lines_ky1 = -1;
  const double fac = units::kPi * units::kPi / (beta_ * beta_);
  const int nzc = n_[2] / 2 + 1;
  for (int kx = 0; kx < n_[0]; ++kx) {
    const double mx = (kx < (n_[0] + 1) / 2 ? kx : kx - n_[0]) * box_.inverse[0];
    for (int ky = 0; ky < n_[1]; ++ky) {
      const double my = (ky < (n_[1] + 1) / 2 ? ky : ky - n_[1]) * box_.inverse[1];
      for (int kz = 0; kz < nzc; ++kz) {
        const double mz = kz * box_.inverse[2];
        const double m2 = mx * mx + my * my + mz * mz;
        if (m2 == 0) continue;
        const double denom = units::kPi * box_.volume() * m2 * bsp_mod_[0][kx] * bsp_mod_[1][ky] * bsp_mod_[2][kz];
        const size_t c = (static_cast<size_t>(kx) * n_[1] + ky) * nzc + kz;
        plans_->eterm[c] = coulomb_factor_ * std::exp(-fac * m2) / denom;
      }
    }
  }
  if (device_) push_grid();
}

void Pme::set_device(std::unique_ptr<gpu::PmeDevice> device) {
  device_ = std::move(device);
  if (device_) push_grid();
}

void Pme::push_grid() {
  gpu::PmeGrid g;
  g.nx = n_[0];
  g.ny = n_[1];
  g.nz = n_[2];
  g.order = order_;
  for (int d = 0; d < 3; ++d) g.inv[d] = static_cast<float>(box_.inverse[d]);
  g.fac = static_cast<float>(units::kPi * units::kPi / (beta_ * beta_));
  const std::vector<float> eterm(plans_->eterm.begin(), plans_->eterm.end());
  device_->set_grid(g, eterm);
}

double Pme::compute_on_device(const std::vector<Vec3>& x, const std::vector<double>& charge, std::vector<Vec3>* f,
                              Mat3* virial) {
  const size_t natoms = x.size();
  device_q_.assign(charge.begin(), charge.begin() + static_cast<int64_t>(natoms));
  device_s_.resize(3 * natoms);
  for (size_t a = 0; a < natoms; ++a)
    for (int d = 0; d < 3; ++d) {
      double s = x[a][d] * box_.inverse[d];
      s -= std::floor(s);
      device_s_[3 * a + d] = static_cast<float>(s);
    }
  device_->run(device_s_, device_q_, virial != nullptr, &device_f_, &device_sums_);
  for (size_t a = 0; a < natoms; ++a)
    for (int d = 0; d < 3; ++d) (*f)[a][d] += device_f_[3 * a + d];
  if (virial == nullptr) return 0;
  const double* v = &device_sums_[1];  // xx, yy, zz, xy, xz, yz
  const double full[3][3] = {{v[0], v[3], v[4]}, {v[3], v[1], v[5]}, {v[4], v[5], v[2]}};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) (*virial)[a][b] += 0.25 * full[a][b];
  return 0.5 * device_sums_[0];
}

Pme::~Pme() = default;

namespace {

// One atom's order^3 contributions q theta_x theta_y theta_z into a padded grid at (i0, j0, k0); kOrder > 0
// fixes the order at compile time (the inner run is then one or two SIMD vectors), 0 takes p.
template <int kOrder>
void spread_atom(double q, const double* tx, const double* ty, const double* tz, int p, const int* first,
                 int pny, int pnz, double* g) {
  const int n = kOrder > 0 ? kOrder : p;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const double qxy = q * tx[i] * ty[j];
      double* row = g + (static_cast<size_t>(first[0] + i) * pny + first[1] + j) * pnz + first[2];
      for (int k = 0; k < n; ++k) row[k] += qxy * tz[k];
    }
}

// The gradient of sum theta_x theta_y theta_z phi at one atom, from the padded potential.
template <int kOrder>
void gather_atom(const double* tx, const double* ty, const double* tz, const double* dx, const double* dy,
                 const double* dz, int p, const int* first, int pny, int pnz, const double* g, double out[3]) {
  const int n = kOrder > 0 ? kOrder : p;
  double fx = 0, fy = 0, fz = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const double* row = g + (static_cast<size_t>(first[0] + i) * pny + first[1] + j) * pnz + first[2];
      double sz = 0, sdz = 0;
      for (int k = 0; k < n; ++k) {
        sz += tz[k] * row[k];
        sdz += dz[k] * row[k];
      }
      fx += dx[i] * ty[j] * sz;
      fy += tx[i] * dy[j] * sz;
      fz += tx[i] * ty[j] * sdz;
    }
  out[0] = fx;
  out[1] = fy;
  out[2] = fz;
}

// One k-space point's energy |S|^2 eterm (twice where the half-complex grid stands for kz and -kz: all
// but kz = 0 and nz/2), its virial added to *vir.
double add_point_virial(const double* S, double eterm, int kz, int nz, double fac, const Vec3& m, double m2,
                        Mat3* vir) {
  const double weight = (kz == 0 || (nz % 2 == 0 && kz == nz / 2)) ? 1.0 : 2.0;
  const double e = weight * eterm * (S[0] * S[0] + S[1] * S[1]);
  const double vfactor = (fac * m2 + 1) * 2 / m2;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) (*vir)[a][b] += e * (vfactor * m[a] * m[b] - (a == b ? 1.0 : 0.0));
  return e;
}

}  // namespace

double Pme::compute(const std::vector<Vec3>& x, const std::vector<double>& charge, std::vector<Vec3>* f,
                    Mat3* virial, const PmeShare* share) {
  if (device_) {
    QK_CHECK(share == nullptr, "PME on a GPU runs on one rank: run PME on the CPU (-pme cpu) to share it over ranks");
    return compute_on_device(x, charge, f, virial);
  }
  const int natoms = static_cast<int>(x.size()), p = order_;
  // The FFT split over the ranks where the share can (pme_slab_fft.h); else replicated after sum_grid.
  const bool slabs = share && share->size > 1 && share->exchange && PmeSlabFft::fits(n_, share->size);
  if (slabs && (!slabs_ || slabs_->rank() != share->rank || slabs_->size() != share->size))
    slabs_ = std::make_unique<PmeSlabFft>(n_, share->rank, share->size, share->exchange);
  // The atoms this call spreads and gathers (all, or a rank's share).
  const int A0 = share ? std::clamp(share->a0, 0, natoms) : 0;
  const int A1 = share ? std::clamp(share->a1, A0, natoms) : natoms;
  const int nx = n_[0], ny = n_[1], nz = n_[2];
  const int pnx = nx + p - 1, pny = ny + p - 1, pnz = nz + p - 1;
  const size_t npadded = static_cast<size_t>(pnx) * pny * pnz;
  Plans& P = *plans_;
  // Per atom: the first grid point and the spline weights per dimension.
  P.first.resize(natoms);
  P.theta.resize(static_cast<size_t>(natoms) * 3 * p);
  P.dtheta.resize(P.theta.size());
  qk::parallel_for(A0, A1, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t a = lo; a < hi; ++a) {
      for (int d = 0; d < 3; ++d) {
        double s = x[a][d] * box_.inverse[d];
        s -= std::floor(s);
        const double u = s * n_[d];
        int i = static_cast<int>(u);
        const double frac = u - i;
        if (i >= n_[d]) i -= n_[d];  // s rounded up to 1
        P.first[a][d] = i;
        bspline(frac, p, &P.theta[(a * 3 + d) * p], &P.dtheta[(a * 3 + d) * p]);
      }
    }
  });
  // Over slabs, the x-planes this rank's charges reach (only those are folded, sent and received back).
  std::vector<char>& touched = P.touched;
  if (slabs) {
    touched.assign(nx, 0);
    for (int a = A0; a < A1; ++a)
      if (charge[a] != 0)
        for (int i = 0; i < p; ++i) touched[(P.first[a][0] + i) % nx] = 1;
  }
  // Spread: atoms overlap on the grid, so each thread's share of the atoms goes to its own padded grid;
  // the grids are then folded (padding onto the periodic images) and summed in order, by x-planes.
  const int nparts = std::max(1, std::min(A1 - A0, num_threads()));
  if (static_cast<int>(P.padded.size()) < nparts) P.padded.resize(nparts);
  qk::parallel_for(0, nparts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t part = lo; part < hi; ++part) {
      std::vector<double>& g = P.padded[part];
      g.assign(npadded, 0.0);
      const int a0 = A0 + static_cast<int>(static_cast<int64_t>(A1 - A0) * part / nparts);
      const int a1 = A0 + static_cast<int>(static_cast<int64_t>(A1 - A0) * (part + 1) / nparts);
      for (int a = a0; a < a1; ++a) {
        const double q = charge[a];
        if (q == 0) continue;
        const double *tx = &P.theta[(a * 3 + 0) * p], *ty = &P.theta[(a * 3 + 1) * p], *tz = &P.theta[(a * 3 + 2) * p];
        if (p == 4) {
          spread_atom<4>(q, tx, ty, tz, p, P.first[a].data(), pny, pnz, g.data());
        } else {
          spread_atom<0>(q, tx, ty, tz, p, P.first[a].data(), pny, pnz, g.data());
        }
      }
    }
  });
  std::vector<double>& grid = P.grid;
  qk::parallel_for(0, nx, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t tx = lo; tx < hi; ++tx) {
      if (slabs && !touched[tx]) continue;
      double* plane = &grid[static_cast<size_t>(tx) * ny * nz];
      std::fill(plane, plane + static_cast<size_t>(ny) * nz, 0.0);
      for (int part = 0; part < nparts; ++part)
        for (int64_t ux = tx; ux < pnx; ux += nx)
          for (int uy = 0; uy < pny; ++uy) {
            const double* src = &P.padded[part][(static_cast<size_t>(ux) * pny + uy) * pnz];
            double* dst = plane + static_cast<size_t>(uy < ny ? uy : uy - ny) * nz;
            for (int uz = 0; uz < nz; ++uz) dst[uz] += src[uz];
            for (int uz = nz; uz < pnz; ++uz) dst[uz - nz] += src[uz];
          }
    }
  });
  double energy = 0;
  if (slabs) {
    slabs_->forward(grid.data(), touched);
    energy = solve_lines(slabs_->kspace(), slabs_->ky_begin(share->rank), slabs_->ky_begin(share->rank + 1), virial);
    slabs_->backward(grid.data());
  } else {
    energy = solve_replicated(share, virial);
  }
  // The potential in the padded layout (each padding point holds its periodic image), then the gather:
  // F = -q grad(sum_k theta(k) phi(k)).
  std::vector<double>& phi = P.padded[0];
  qk::parallel_for(0, pnx, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ux = lo; ux < hi; ++ux) {
      const int64_t sx = ux < nx ? ux : ux - nx;
      if (slabs && !touched[sx]) continue;  // not received: no atom of this rank reads it
      for (int uy = 0; uy < pny; ++uy) {
        const double* src = &grid[(static_cast<size_t>(sx) * ny + (uy < ny ? uy : uy - ny)) * nz];
        double* dst = &phi[(static_cast<size_t>(ux) * pny + uy) * pnz];
        std::copy(src, src + nz, dst);
        std::copy(src, src + (pnz - nz), dst + nz);
      }
    }
  });
  const double scale[3] = {nx * box_.inverse[0], ny * box_.inverse[1], nz * box_.inverse[2]};
  qk::parallel_for(A0, A1, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t a = lo; a < hi; ++a) {
      const double q = charge[a];
      if (q == 0) continue;
      const double *tx = &P.theta[(a * 3 + 0) * p], *ty = &P.theta[(a * 3 + 1) * p], *tz = &P.theta[(a * 3 + 2) * p];
      const double *dx = &P.dtheta[(a * 3 + 0) * p], *dy = &P.dtheta[(a * 3 + 1) * p], *dz = &P.dtheta[(a * 3 + 2) * p];
      double g[3];
      if (p == 4) {
        gather_atom<4>(tx, ty, tz, dx, dy, dz, p, P.first[a].data(), pny, pnz, phi.data(), g);
      } else {
        gather_atom<0>(tx, ty, tz, dx, dy, dz, p, P.first[a].data(), pny, pnz, phi.data(), g);
      }
      for (int d = 0; d < 3; ++d) (*f)[a][d] -= q * g[d] * scale[d];
    }
  });
  return energy;
}

double Pme::solve_replicated(const PmeShare* share, Mat3* virial) {
  const int nx = n_[0], ny = n_[1], nz = n_[2], nzc = nz / 2 + 1;
  std::vector<double>& grid = plans_->grid;
  if (share && share->sum_grid) share->sum_grid(grid.data(), static_cast<int64_t>(nx) * ny * nz);
  fftw_execute(plans_->forward);
  // Solve: S(m) times the influence function (fixed with the box: computed once), and on energy steps the
  // energy and virial from |S(m)|^2.
  const double fac = units::kPi * units::kPi / (beta_ * beta_);
  double energy = 0;
  Mat3 vir{};
  fftw_complex* S = plans_->kspace;
  const std::vector<double>& eterm = plans_->eterm;
  if (virial == nullptr) {
    const size_t ncomplex = eterm.size();
    for (size_t c = 0; c < ncomplex; ++c) {
      S[c][0] *= eterm[c];
      S[c][1] *= eterm[c];
    }
  } else {
    for (int kx = 0; kx < nx; ++kx) {
      const double mx = (kx < (nx + 1) / 2 ? kx : kx - nx) * box_.inverse[0];
      for (int ky = 0; ky < ny; ++ky) {
        const double my = (ky < (ny + 1) / 2 ? ky : ky - ny) * box_.inverse[1];
        for (int kz = 0; kz < nzc; ++kz) {
          const size_t c = (static_cast<size_t>(kx) * ny + ky) * nzc + kz;
          const double mz = kz * box_.inverse[2];
          const double m2 = mx * mx + my * my + mz * mz;
          if (m2 == 0) {
            S[c][0] = S[c][1] = 0;
            continue;
          }
          energy += add_point_virial(S[c], eterm[c], kz, nz, fac, {mx, my, mz}, m2, &vir);
          S[c][0] *= eterm[c];
          S[c][1] *= eterm[c];
        }
      }
    }
  }
  energy *= 0.5;
  if (share && !share->energy) energy = 0;  // another rank reports it
  if (virial != nullptr && (!share || share->energy))
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) (*virial)[a][b] += 0.25 * vir[a][b];
  fftw_execute(plans_->backward);  // grid = the potential at the grid points
  return energy;
}

double Pme::solve_lines(double* lines, int ky_begin, int ky_end, Mat3* virial) {
  const int nx = n_[0], ny = n_[1], nz = n_[2], nzc = nz / 2 + 1;
  Plans& P = *plans_;
  if (P.lines_ky0 != ky_begin || P.lines_ky1 != ky_end) {  // eterm in the lines' layout, once per box and rank
    P.eterm_lines.resize(static_cast<size_t>(ky_end - ky_begin) * nzc * nx);
    for (int ky = ky_begin; ky < ky_end; ++ky)
      for (int kz = 0; kz < nzc; ++kz)
        for (int kx = 0; kx < nx; ++kx)
          P.eterm_lines[(static_cast<size_t>(ky - ky_begin) * nzc + kz) * nx + kx] =
              P.eterm[(static_cast<size_t>(kx) * ny + ky) * nzc + kz];
    P.lines_ky0 = ky_begin;
    P.lines_ky1 = ky_end;
  }
  const std::vector<double>& eterm = P.eterm_lines;
  if (virial == nullptr) {
    const size_t n = eterm.size();
    for (size_t c = 0; c < n; ++c) {
      lines[2 * c] *= eterm[c];
      lines[2 * c + 1] *= eterm[c];
    }
    return 0;
  }
  const double fac = units::kPi * units::kPi / (beta_ * beta_);
  double energy = 0;
  Mat3 vir{};
  for (int ky = ky_begin; ky < ky_end; ++ky) {
    const double my = (ky < (ny + 1) / 2 ? ky : ky - ny) * box_.inverse[1];
    for (int kz = 0; kz < nzc; ++kz) {
      const double mz = kz * box_.inverse[2];
      for (int kx = 0; kx < nx; ++kx) {
        const size_t c = (static_cast<size_t>(ky - ky_begin) * nzc + kz) * nx + kx;
        double* S = lines + 2 * c;
        const double mx = (kx < (nx + 1) / 2 ? kx : kx - nx) * box_.inverse[0];
        const double m2 = mx * mx + my * my + mz * mz;
        if (m2 == 0) {
          S[0] = S[1] = 0;
          continue;
        }
        energy += add_point_virial(S, eterm[c], kz, nz, fac, {mx, my, mz}, m2, &vir);
        S[0] *= eterm[c];
        S[1] *= eterm[c];
      }
    }
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) (*virial)[a][b] += 0.25 * vir[a][b];
  return 0.5 * energy;
}

}  // namespace qk::md

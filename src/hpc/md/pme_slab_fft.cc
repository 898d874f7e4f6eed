#include "pme_slab_fft.h"

#include <fftw3.h>

#include <algorithm>
#include <cstring>

#include "fftw_planning.h"
#include "qk/base/error.h"
#include "qk/base/thread_pool.h"

namespace qk::md {

struct PmeSlabFft::Plans {
  double* slab = nullptr;          // own planes, real: nxl x ny x nz
  fftw_complex* planes = nullptr;  // own planes, transformed along y and z: nxl x ny x nzc
  fftw_complex* lines = nullptr;   // own ky lines over every x: nyl x nzc x nx
  fftw_plan yz_forward = nullptr, yz_backward = nullptr, x_forward = nullptr, x_backward = nullptr;
  ~Plans() {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    for (fftw_plan p : {yz_forward, yz_backward, x_forward, x_backward})
      if (p) fftw_destroy_plan(p);
    if (slab) fftw_free(slab);
    if (planes) fftw_free(planes);
    if (lines) fftw_free(lines);
  }
};

bool PmeSlabFft::fits(const std::array<int, 3>& n, int size) { return size >= 1 && n[0] >= size && n[1] >= size; }

PmeSlabFft::PmeSlabFft(const std::array<int, 3>& n, int rank, int size, PairExchange exchange)
    : n_(n), rank_(rank), size_(size), nzc_(n[2] / 2 + 1), exchange_(std::move(exchange)) {
  QK_CHECK(fits(n, size), "PME over ", size, " ranks: the ", n[0], "x", n[1], "x", n[2],
           " grid has fewer x-planes or y-lines than ranks");
  QK_CHECK(rank >= 0 && rank < size, "PME over ranks: rank ", rank, " of ", size);
  QK_CHECK(size == 1 || exchange_, "PME over ", size, " ranks needs the ranks' exchange");
  x0_.resize(size + 1);
  y0_.resize(size + 1);
  for (int r = 0; r <= size; ++r) {
    x0_[r] = static_cast<int>(static_cast<int64_t>(n[0]) * r / size);
    y0_[r] = static_cast<int>(static_cast<int64_t>(n[1]) * r / size);
  }
  touched_.assign(size, std::vector<char>(n[0], 0));
  plans_ = std::make_unique<Plans>();
  Plans& P = *plans_;
  const int nx = n[0], ny = n[1], nz = n[2];
  P.slab = fftw_alloc_real(static_cast<size_t>(nxl()) * ny * nz);
  P.planes = fftw_alloc_complex(static_cast<size_t>(nxl()) * ny * nzc_);
  P.lines = fftw_alloc_complex(static_cast<size_t>(nyl()) * nzc_ * nx);
  QK_CHECK(P.slab && P.planes && P.lines, "PME over ranks: cannot allocate the ", nx, "x", ny, "x", nz,
           " grid's slabs");
  const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  plan_on_pool_threads();
  const int yz[2] = {ny, nz};
  P.yz_forward = fftw_plan_many_dft_r2c(2, yz, nxl(), P.slab, nullptr, 1, ny * nz, P.planes, nullptr, 1, ny * nzc_,
                                        FFTW_ESTIMATE);
  P.yz_backward = fftw_plan_many_dft_c2r(2, yz, nxl(), P.planes, nullptr, 1, ny * nzc_, P.slab, nullptr, 1, ny * nz,
                                         FFTW_ESTIMATE);
  P.x_forward = fftw_plan_many_dft(1, &n_[0], nyl() * nzc_, P.lines, nullptr, 1, nx, P.lines, nullptr, 1, nx,
                                   FFTW_FORWARD, FFTW_ESTIMATE);
  P.x_backward = fftw_plan_many_dft(1, &n_[0], nyl() * nzc_, P.lines, nullptr, 1, nx, P.lines, nullptr, 1, nx,
                                    FFTW_BACKWARD, FFTW_ESTIMATE);
  QK_CHECK(P.yz_forward && P.yz_backward && P.x_forward && P.x_backward, "PME over ranks: FFTW could not plan the ",
           nx, "x", ny, "x", nz, " grid's slab transforms");
}

PmeSlabFft::~PmeSlabFft() = default;

double* PmeSlabFft::kspace() { return &plans_->lines[0][0]; }

void PmeSlabFft::forward(const double* grid, const std::vector<char>& touched) {
  QK_CHECK(static_cast<int>(touched.size()) == n_[0], "PmeSlabFft::forward: ", touched.size(),
           " plane flags for a grid of ", n_[0], " x-planes");
  const int nx = n_[0], ny = n_[1], nz = n_[2], S = size_, r = rank_;
  const size_t plane = static_cast<size_t>(ny) * nz;
  Plans& P = *plans_;
  // Every rank's touched planes (each needs the others': which planes arrive now, which to send back later).
  touched_[r] = touched;
  for (int k = 1; k < S; ++k) {
    const int to = (r + k) % S, from = (r - k + S) % S;
    send_.assign(touched.begin(), touched.end());
    recv_.resize(nx);
    exchange_(to, send_.data(), nx, from, recv_.data(), nx);
    for (int x = 0; x < nx; ++x) touched_[from][x] = recv_[x] != 0;
  }
  // The own planes: this rank's charges, then each other rank's for the planes it touched here.
  const int x0 = x0_[r], x1 = x0_[r + 1];
  for (int x = x0; x < x1; ++x) {
    double* dst = P.slab + (x - x0) * plane;
    if (touched[x]) {
      std::memcpy(dst, grid + x * plane, plane * sizeof(double));
    } else {
      std::fill(dst, dst + plane, 0.0);
    }
  }
  for (int k = 1; k < S; ++k) {
    const int to = (r + k) % S, from = (r - k + S) % S;
    send_.clear();
    for (int x = x0_[to]; x < x0_[to + 1]; ++x)
      if (touched[x]) send_.insert(send_.end(), grid + x * plane, grid + (x + 1) * plane);
    int arriving = 0;
    for (int x = x0; x < x1; ++x) arriving += touched_[from][x];
    recv_.resize(arriving * plane);
    exchange_(to, send_.data(), static_cast<int64_t>(send_.size()), from, recv_.data(),
              static_cast<int64_t>(recv_.size()));
    const double* src = recv_.data();
    for (int x = x0; x < x1; ++x) {
      if (!touched_[from][x]) continue;
      double* dst = P.slab + (x - x0) * plane;
      for (size_t i = 0; i < plane; ++i) dst[i] += src[i];
      src += plane;
    }
  }
  fftw_execute(P.yz_forward);
  // The transpose: to each rank its ky lines of this rank's planes; from each its planes of this rank's lines.
  const int nzc = nzc_, nyl = this->nyl();
  for (int k = 0; k < S; ++k) {
    const int to = (r + k) % S, from = (r - k + S) % S;
    const int ty0 = y0_[to], tny = y0_[to + 1] - ty0;
    const int fx0 = x0_[from], fnx = x0_[from + 1] - fx0;
    const size_t block = static_cast<size_t>(tny) * nzc;  // complex values per plane for `to`
    send_.resize(2 * block * (x1 - x0));
    qk::parallel_for(0, x1 - x0, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t xl = lo; xl < hi; ++xl)
        std::memcpy(&send_[2 * block * xl], P.planes[(static_cast<size_t>(xl) * ny + ty0) * nzc],
                    2 * block * sizeof(double));
    });
    if (k == 0) {
      recv_.swap(send_);  // this rank's own block: [x - x0][ky - ky0][kz] already
    } else {
      recv_.resize(2 * static_cast<size_t>(fnx) * nyl * nzc);
      exchange_(to, send_.data(), static_cast<int64_t>(send_.size()), from, recv_.data(),
                static_cast<int64_t>(recv_.size()));
    }
    // recv_: [x - fx0][ky - ky0][kz] -> lines [ky - ky0][kz][x].
    qk::parallel_for(0, nyl, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t yl = lo; yl < hi; ++yl)
        for (int kz = 0; kz < nzc; ++kz) {
          fftw_complex* line = P.lines + (static_cast<size_t>(yl) * nzc + kz) * nx + fx0;
          for (int xl = 0; xl < fnx; ++xl) {
            const double* v = &recv_[2 * ((static_cast<size_t>(xl) * nyl + yl) * nzc + kz)];
            line[xl][0] = v[0];
            line[xl][1] = v[1];
          }
        }
    });
  }
  fftw_execute(P.x_forward);
}

void PmeSlabFft::backward(double* grid) {
  const int nx = n_[0], ny = n_[1], nz = n_[2], S = size_, r = rank_, nzc = nzc_, nyl = this->nyl();
  const size_t plane = static_cast<size_t>(ny) * nz;
  Plans& P = *plans_;
  fftw_execute(P.x_backward);
  // The transpose back: to each rank its planes of this rank's lines; from each its lines of this rank's planes.
  const int x0 = x0_[r], x1 = x0_[r + 1];
  for (int k = 0; k < S; ++k) {
    const int to = (r + k) % S, from = (r - k + S) % S;
    const int tx0 = x0_[to], tnx = x0_[to + 1] - tx0;
    const int fy0 = y0_[from], fny = y0_[from + 1] - fy0;
    send_.resize(2 * static_cast<size_t>(tnx) * nyl * nzc);  // [x - tx0][ky - ky0][kz]
    qk::parallel_for(0, nyl, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t yl = lo; yl < hi; ++yl)
        for (int kz = 0; kz < nzc; ++kz) {
          const fftw_complex* line = P.lines + (static_cast<size_t>(yl) * nzc + kz) * nx + tx0;
          for (int xl = 0; xl < tnx; ++xl) {
            double* v = &send_[2 * ((static_cast<size_t>(xl) * nyl + yl) * nzc + kz)];
            v[0] = line[xl][0];
            v[1] = line[xl][1];
          }
        }
    });
    const size_t block = static_cast<size_t>(fny) * nzc;  // complex values per own plane from `from`
    if (k == 0) {
      recv_.swap(send_);  // this rank's own block
    } else {
      recv_.resize(2 * block * (x1 - x0));
      exchange_(to, send_.data(), static_cast<int64_t>(send_.size()), from, recv_.data(),
                static_cast<int64_t>(recv_.size()));
    }
    qk::parallel_for(0, x1 - x0, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t xl = lo; xl < hi; ++xl)
        std::memcpy(P.planes[(static_cast<size_t>(xl) * ny + fy0) * nzc], &recv_[2 * block * xl],
                    2 * block * sizeof(double));
    });
  }
  fftw_execute(P.yz_backward);
  // The potential to the ranks whose atoms touched each plane.
  const std::vector<char>& mine = touched_[r];
  for (int x = x0; x < x1; ++x)
    if (mine[x]) std::memcpy(grid + x * plane, P.slab + (x - x0) * plane, plane * sizeof(double));
  for (int k = 1; k < S; ++k) {
    const int to = (r + k) % S, from = (r - k + S) % S;
    send_.clear();
    for (int x = x0; x < x1; ++x)
      if (touched_[to][x]) send_.insert(send_.end(), P.slab + (x - x0) * plane, P.slab + (x - x0 + 1) * plane);
    int arriving = 0;
    for (int x = x0_[from]; x < x0_[from + 1]; ++x) arriving += mine[x];
    recv_.resize(arriving * plane);
    exchange_(to, send_.data(), static_cast<int64_t>(send_.size()), from, recv_.data(),
              static_cast<int64_t>(recv_.size()));
    const double* src = recv_.data();
    for (int x = x0_[from]; x < x0_[from + 1]; ++x) {
      if (!mine[x]) continue;
      std::memcpy(grid + x * plane, src, plane * sizeof(double));
      src += plane;
    }
  }
}

}  // namespace qk::md

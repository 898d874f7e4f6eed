// PME's 3-D FFT split over ranks (GROMACS's PME decomposition; here in slabs
// of the grid, one transpose each way). Rank r of `size` owns the charge
// grid's x-planes [x_begin(r), x_begin(r + 1)) in real space and, in k-space,
// the ky lines [ky_begin(r), ky_begin(r + 1)) for every kx and kz.
// forward() sums every rank's spread charges into the planes' owners (a rank
// sends only the planes its atoms touched), transforms each plane along y
// and z (real to complex), transposes (one exchange with every other rank)
// and transforms along x; backward() undoes it and sends each rank the
// potential at the planes its atoms touched. Each rank transforms 1/size of
// the grid, where the replicated scheme all-reduces the whole grid and
// transforms all of it on every rank.
//
//   PmeSlabFft fft({nx, ny, nz}, rank, size, share.exchange);
//   fft.forward(grid.data(), touched);   // every rank at once
//   ... scale fft.kspace() (layout below) ...
//   fft.backward(grid.data());           // the potential at the touched planes
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace qk::md {

// One send and one receive together, every rank calling at once (ForceShare::exchange).
using PairExchange =
    std::function<void(int to, const double* send, int64_t send_count, int from, double* recv, int64_t recv_count)>;

class PmeSlabFft {
 public:
  // Whether `size` ranks can split an n grid this way (each rank at least one x-plane and one ky line).
  static bool fits(const std::array<int, 3>& n, int size);

  PmeSlabFft(const std::array<int, 3>& n, int rank, int size, PairExchange exchange);
  ~PmeSlabFft();
  PmeSlabFft(const PmeSlabFft&) = delete;
  PmeSlabFft& operator=(const PmeSlabFft&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int x_begin(int r) const { return x0_[r]; }
  int ky_begin(int r) const { return y0_[r]; }

  // grid: this rank's spread charges over the whole nx x ny x nz grid (z fastest), read only at the
  // planes `touched` marks (nx flags; the others may hold anything).
  void forward(const double* grid, const std::vector<char>& touched);
  // This rank's k-space lines after forward(): complex values as (re, im) pairs, layout
  // [ky - ky_begin(rank)][kz][kx] with kz < nz / 2 + 1 (kx fastest). Scaled in place before backward().
  double* kspace();
  // The potential (the unnormalized inverse transform) into grid at the planes the last forward() marked
  // touched; grid's other planes are left as they were.
  void backward(double* grid);

 private:
  struct Plans;
  std::array<int, 3> n_;
  int rank_, size_, nzc_;
  std::vector<int> x0_, y0_;  // size + 1 bounds each
  PairExchange exchange_;
  std::vector<std::vector<char>> touched_;  // per rank, its touched planes (from the last forward)
  std::vector<double> send_, recv_;
  std::unique_ptr<Plans> plans_;
  int nxl() const { return x0_[rank_ + 1] - x0_[rank_]; }
  int nyl() const { return y0_[rank_ + 1] - y0_[rank_]; }
};

}  // namespace qk::md

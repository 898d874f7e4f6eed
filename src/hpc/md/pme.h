// Smooth particle-mesh Ewald (Essmann et al. 1995), reciprocal part, the way
// GROMACS does it: charges spread on an nx x ny x nz grid with cardinal
// B-splines of order pme-order, a real-to-complex FFT (FFTW), the influence
// function exp(-pi^2 m^2 / beta^2) / (pi V m^2 B(m)) with GROMACS's B-spline
// moduli, the energy and virial summed in k-space, and the forces gathered from
// the convolved grid with the splines' derivatives. Reported as "Coul. recip.".
//
//   Pme pme(box, pme_grid_size(box, 0.12, 4), /*order=*/4, ewald_coefficient(1.0, 1e-5), /*eps_r=*/1);
//   double e = pme.compute(x, q, &f, &virial);
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "pbc.h"
#include "pme_slab_fft.h"

namespace qk::md {

// GROMACS's calc_ewaldcoeff_q: the beta where erfc(beta rc) = rtol (bisection).
double ewald_coefficient(double rc, double rtol);

// GROMACS's calcFftGrid: per box vector, the smallest size of its list of
// FFT-friendly sizes with spacing <= `spacing` and at least 2 (order - 1) points.
std::array<int, 3> pme_grid_size(const Vec3& box, double spacing, int order);

// One rank's part when several compute the forces (ForceShare, forces.h):
// it spreads and gathers atoms [a0, a1) only. With `exchange` (and a grid of
// at least `size` x-planes and y-lines) the FFT is split over the ranks
// (pme_slab_fft.h): each rank transforms its slab and reports its part of
// the energy and virial (the ranks' terms are summed). Otherwise the charge
// grid is summed over the ranks by `sum_grid` (in place, every rank the
// total) before the FFT, which every rank then does, and only the rank with
// `energy` reports the energy and virial.
struct PmeShare {
  int a0 = 0, a1 = 0;
  std::function<void(double* data, int64_t count)> sum_grid;
  bool energy = true;
  int rank = 0, size = 1;
  PairExchange exchange = {};
};

namespace gpu {
class PmeDevice;
}

class Pme {
 public:
  Pme(const Vec3& box, std::array<int, 3> grid, int order, double beta, double epsilon_r);
  ~Pme();
  Pme(const Pme&) = delete;
  Pme& operator=(const Pme&) = delete;

  // Adds the reciprocal-space forces to f and virial (GROMACS's convention) and returns the energy;
  // with virial == nullptr only the forces (the energy returned is 0).
  double compute(const std::vector<Vec3>& x, const std::vector<double>& charge, std::vector<Vec3>* f, Mat3* virial,
                 const PmeShare* share = nullptr);
  std::array<int, 3> grid() const { return n_; }
  // A new box (pressure coupling): the grid stays, the influence function is made again.
  void set_box(const Vec3& box);
  // From now on the spreading, FFTs, solve and gathering run on `device` (pme_gpu_device.h: CUDA's or its
  // host emulation), in single precision; null: on the CPU again. One rank only (no PmeShare).
  void set_device(std::unique_ptr<gpu::PmeDevice> device);
  const gpu::PmeDevice* device() const { return device_.get(); }

 private:
  struct Plans;
  RectBox box_;
  std::array<int, 3> n_;
  int order_;
  double beta_, coulomb_factor_;
  std::array<std::vector<double>, 3> bsp_mod_;  // |sum_k M_order(k+1) e^{2 pi i m k / n}|^2 per dimension
  std::unique_ptr<Plans> plans_;
  std::unique_ptr<PmeSlabFft> slabs_;  // the FFT over ranks, made for the share that asks for it
  std::unique_ptr<gpu::PmeDevice> device_;
  std::vector<float> device_s_, device_q_, device_f_;  // a device step's fractional coordinates, charges, forces
  std::vector<double> device_sums_;
  void push_grid();  // the grid and influence function to the device
  // The charge grid summed over the share's ranks (or not shared), transformed, solved and transformed back on
  // this rank; the energy and virial where this rank reports them.
  double solve_replicated(const PmeShare* share, Mat3* virial);
  // The solve over the k-space lines this rank owns (PmeSlabFft's layout); its part of the energy and virial.
  double solve_lines(double* lines, int ky_begin, int ky_end, Mat3* virial);
  double compute_on_device(const std::vector<Vec3>& x, const std::vector<double>& charge, std::vector<Vec3>* f,
                           Mat3* virial);
};

}  // namespace qk::md

// PME's GPU kernels emulated on the host (pme_gpu_device.h): the same
// per-atom and per-k-point arithmetic (pme_gpu_math.h) in float, the FFTs as
// plain separable discrete Fourier transforms in double (test grids are
// small), so the tests check the data layout, the spreading and gathering
// with periodic wrap, the solve and the transforms' conventions (cuFFT's and
// FFTW's: unnormalized, half-complex along z) without a GPU.
#include <algorithm>
#include <cmath>
#include <complex>

#include "pme_gpu_device.h"
#include "qk/base/error.h"
#include "qk/hpc/md/units.h"

namespace qk::md::gpu {

namespace {

using Complex = std::complex<double>;

class HostPmeDevice final : public PmeDevice {
 public:
  std::string name() const override { return "host emulation of the CUDA PME kernels"; }
  void set_grid(const PmeGrid& g, const std::vector<float>& eterm) override {
    QK_CHECK(g.order >= 3 && g.order <= kPmeMaxOrder, "PME on a GPU: pme-order ", g.order, " (3..", kPmeMaxOrder,
             ")");
    g_ = g;
    eterm_ = eterm;
  }
  void run(const std::vector<float>& s, const std::vector<float>& q, bool energies, std::vector<float>* f,
           std::vector<double>* sums) override {
    const int nx = g_.nx, ny = g_.ny, nz = g_.nz, nzc = nz / 2 + 1, p = g_.order;
    const size_t natoms = q.size();
    // Spread (the CUDA kernel: a thread per atom, atomic adds).
    std::vector<float> grid(static_cast<size_t>(nx) * ny * nz, 0.0f);
    for (size_t a = 0; a < natoms; ++a) {
      if (q[a] == 0) continue;
      PmeAtomSplines sp;
      pme_atom_splines(g_, &s[3 * a], &sp);
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j)
          for (int k = 0; k < p; ++k)
            grid[pme_index(g_, sp.first[0] + i, sp.first[1] + j, sp.first[2] + k)] +=
                q[a] * sp.th[0][i] * sp.th[1][j] * sp.th[2][k];
    }
    // Real to half-complex (cuFFT R2C): z, then y, then x.
    std::vector<Complex> c(static_cast<size_t>(nx) * ny * nzc);
    auto at = [&](int x, int y, int z) -> Complex& { return c[(static_cast<size_t>(x) * ny + y) * nzc + z]; };
    for (int x = 0; x < nx; ++x)
      for (int y = 0; y < ny; ++y)
        for (int kz = 0; kz < nzc; ++kz) {
          Complex sum = 0;
          for (int z = 0; z < nz; ++z) sum += static_cast<double>(grid[(static_cast<size_t>(x) * ny + y) * nz + z]) * w(-kz * z, nz);
          at(x, y, kz) = sum;
        }
    transform_xy(&c, nx, ny, nzc, -1);
    // Solve (the CUDA kernel: a thread per k-point), in float as the GPU's.
    PmeKTerms t;
    for (int kx = 0; kx < nx; ++kx)
      for (int ky = 0; ky < ny; ++ky)
        for (int kz = 0; kz < nzc; ++kz) {
          Complex& v = at(kx, ky, kz);
          float re = static_cast<float>(v.real()), im = static_cast<float>(v.imag());
          pme_solve_point(g_, kx, ky, kz, eterm_[(static_cast<size_t>(kx) * ny + ky) * nzc + kz], &re, &im, energies,
                          &t);
          v = Complex(re, im);
        }
    // Half-complex back to real (cuFFT C2R: the imaginary parts at kz = 0 and nz/2 do not count).
    transform_xy(&c, nx, ny, nzc, +1);
    for (int x = 0; x < nx; ++x)
      for (int y = 0; y < ny; ++y)
        for (int z = 0; z < nz; ++z) {
          double v = at(x, y, 0).real();
          for (int kz = 1; kz < nzc; ++kz) {
            const double part = (at(x, y, kz) * w(kz * z, nz)).real();
            v += (nz % 2 == 0 && kz == nz / 2) ? at(x, y, kz).real() * ((z % 2) ? -1.0 : 1.0) : 2 * part;
          }
          grid[(static_cast<size_t>(x) * ny + y) * nz + z] = static_cast<float>(v);
        }
    // Gather (the CUDA kernel: a thread per atom).
    f->assign(3 * natoms, 0.0f);
    const float scale[3] = {nx * g_.inv[0], ny * g_.inv[1], nz * g_.inv[2]};
    for (size_t a = 0; a < natoms; ++a) {
      if (q[a] == 0) continue;
      PmeAtomSplines sp;
      pme_atom_splines(g_, &s[3 * a], &sp);
      const auto& th = sp.th;
      const auto& dth = sp.dth;
      float gx = 0, gy = 0, gz = 0;
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j)
          for (int k = 0; k < p; ++k) {
            const float phi = grid[pme_index(g_, sp.first[0] + i, sp.first[1] + j, sp.first[2] + k)];
            gx += dth[0][i] * th[1][j] * th[2][k] * phi;
            gy += th[0][i] * dth[1][j] * th[2][k] * phi;
            gz += th[0][i] * th[1][j] * dth[2][k] * phi;
          }
      (*f)[3 * a] = -q[a] * gx * scale[0];
      (*f)[3 * a + 1] = -q[a] * gy * scale[1];
      (*f)[3 * a + 2] = -q[a] * gz * scale[2];
    }
    sums->assign(kPmeSums, 0.0);
    if (energies) {
      (*sums)[0] = t.energy;
      for (int k = 0; k < 6; ++k) (*sums)[1 + k] = t.vir[k];
    }
  }

 private:
  // e^{sign 2 pi i k / n}
  static Complex w(int k, int n) { return std::polar(1.0, 2 * units::kPi * k / n); }
  // The complex transforms along y and x (sign -1 forward, +1 backward, unnormalized): each line of n
  // values `stride` apart, for every start the other two indices give.
  static void transform_xy(std::vector<Complex>* c, int nx, int ny, int nzc, int sign) {
    const size_t sy = static_cast<size_t>(nzc), sx = static_cast<size_t>(ny) * nzc;
    std::vector<Complex> tmp(static_cast<size_t>(std::max(nx, ny)));
    auto line = [&](size_t start, int n, size_t stride) {
      for (int k = 0; k < n; ++k) {
        Complex sum = 0;
        for (int i = 0; i < n; ++i) sum += (*c)[start + i * stride] * w(sign * k * i, n);
        tmp[static_cast<size_t>(k)] = sum;
      }
      for (int k = 0; k < n; ++k) (*c)[start + k * stride] = tmp[static_cast<size_t>(k)];
    };
    for (int x = 0; x < nx; ++x)
      for (int kz = 0; kz < nzc; ++kz) line(x * sx + static_cast<size_t>(kz), ny, sy);
    for (int y = 0; y < ny; ++y)
      for (int kz = 0; kz < nzc; ++kz) line(y * sy + static_cast<size_t>(kz), nx, sx);
  }

  PmeGrid g_;
  std::vector<float> eterm_;
};

}  // namespace

std::unique_ptr<PmeDevice> host_pme_device() { return std::make_unique<HostPmeDevice>(); }

#ifndef QK_MD_CUDA
std::unique_ptr<PmeDevice> cuda_pme_device() {
  QK_THROW(DeviceError, "PME on a GPU: this build of qianka has no CUDA (the CUDA toolkit was not found when it was "
                        "configured); run it on the CPU (-pme cpu)");
}
#endif

}  // namespace qk::md::gpu

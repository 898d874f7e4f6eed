// The device side of PME on a GPU (pme_gpu.h): CUDA's (pme_cuda.cu: cuFFT)
// or the host emulation (pme_gpu.cc). Plain C++17 with no other md header,
// so nvcc compiles it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pme_gpu_math.h"

namespace qk::md::gpu {

// What a step returns besides the forces: the energy, then the virial's xx, yy, zz, xy, xz, yz (the sums
// of pme_solve_point, before Pme's 1/2 and 1/4).
inline constexpr int kPmeSums = 7;

class PmeDevice {
 public:
  virtual ~PmeDevice() = default;
  virtual std::string name() const = 0;
  // The grid and the influence function per point of the half-complex grid (nx x ny x (nz/2 + 1),
  // z fastest): at the start and whenever the box changes.
  virtual void set_grid(const PmeGrid& g, const std::vector<float>& eterm) = 0;
  // A step: s holds each atom's fractional coordinates (3 per atom, in [0, 1)), q its charge. f gets each
  // atom's reciprocal-space force (3 floats: -q grad phi, as Pme), sums kPmeSums doubles (with `energies`
  // only).
  virtual void run(const std::vector<float>& s, const std::vector<float>& q, bool energies, std::vector<float>* f,
                   std::vector<double>* sums) = 0;
};

// CUDA's (DeviceError saying why when this build has no CUDA or the machine no GPU).
std::unique_ptr<PmeDevice> cuda_pme_device();
// The kernels emulated on the host, with a plain discrete Fourier transform (tests).
std::unique_ptr<PmeDevice> host_pme_device();

}  // namespace qk::md::gpu

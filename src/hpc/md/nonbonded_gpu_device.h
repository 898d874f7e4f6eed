// The device side of the non-bonded offload (nonbonded_gpu.h): what the
// kernel reads and returns, CUDA's implementation (nonbonded_cuda.cu, built
// with the CUDA toolkit) and the host emulation (nonbonded_gpu.cc). Plain
// C++17 with no other md header, so nvcc compiles it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nonbonded_gpu_pair.h"

namespace qk::md {

namespace gpu {

struct NbEntry {
  int ci, shift, begin, end;  // i-cluster, shift index, cluster pairs [begin, end)
};

// Sums the kernel returns: LJ and Coulomb energies, then per shift the sum of its entries' i-forces.
inline constexpr int kNbSums = 2 + 27 * 3;

class NbDevice {
 public:
  virtual ~NbDevice() = default;
  virtual std::string name() const = 0;
  // Once: the constants and the types' 6 c6 and 12 c12 (ntypes x ntypes).
  virtual void set_params(const NbConsts& k, const std::vector<float>& c6, const std::vector<float>& c12) = 0;
  // At a build (a new cluster order): each slot's atom type (padding: 0).
  virtual void set_types(const std::vector<int>& type) = 0;
  // When the list changes: its entries, j-clusters, interaction masks and the 27 shifts (x, y, z each).
  virtual void set_list(const std::vector<NbEntry>& entries, const std::vector<int>& cj,
                        const std::vector<uint16_t>& mask, const std::vector<float>& shifts) = 0;
  // A step, started: xq holds x, y, z, q per slot (positions less the slot's offset; padding q = 0);
  // entries [e0, e1) run. It may return before the device is done, so the CPU can work meanwhile.
  virtual void launch(const std::vector<float>& xq, int64_t e0, int64_t e1, bool energies) = 0;
  // Waits for the step: f gets 3 x slots floats (all x, then y, then z), sums kNbSums doubles (energies and
  // shift forces only with `energies`).
  virtual void finish(std::vector<float>* f, std::vector<double>* sums) = 0;
};

// Throws qk::DeviceError with `what` (the CUDA file reports through it: it does not include qk's C++20 headers).
[[noreturn]] void nb_device_error(const std::string& what);

// The CUDA device (DeviceError saying why when this build has no CUDA or the machine no GPU).
std::unique_ptr<NbDevice> cuda_nb_device();
// Whether cuda_nb_device() would work here; `why` says why not.
bool cuda_nb_available(std::string* why);
// The kernel emulated on the host (tests).
std::unique_ptr<NbDevice> host_nb_device();

}  // namespace gpu

}  // namespace qk::md

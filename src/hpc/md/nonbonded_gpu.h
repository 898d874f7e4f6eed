// The short-range non-bonded forces offloaded to a GPU, as GROMACS's `-nb gpu`
// (the seed's GPU port: non-bonded on the device while the CPU does the rest).
// The same cluster pair list (pair_list.h) goes to the device whenever it
// changes (a build, a prune, a new box); each step the positions go up and
// the forces per cluster slot, the energies and the shift forces come back
// (launch, then finish: the CPU computes PME and the rest in between); the
// host turns them into atom forces and the virial as the CPU kernel does.
//
// The device side is gpu::NbDevice: CUDA's (nonbonded_cuda.cu: one warp per
// list entry, two cluster pairs of 16 atom pairs per pass, j forces summed
// over the i-slots by shuffles and added atomically) where this build has
// the CUDA toolkit, or a host emulation of the same kernel that runs the
// same per-pair arithmetic (nonbonded_gpu_pair.h) over the same lane layout
// (its sums in another order: the two agree to a float's rounding), so
// everything but the CUDA launch, shuffles and atomics is tested without a
// GPU. Float throughout (GROMACS's GPU kernels are single precision);
// energies, shift forces and atom forces summed in double.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nonbonded.h"
#include "nonbonded_gpu_device.h"

namespace qk::md {


class NonbondedGpu {
 public:
  NonbondedGpu(const Topology& top, const NonbondedParams& p, std::unique_ptr<gpu::NbDevice> device);
  // As NonbondedKernel::compute: adds the forces to f, returns energies and virial (with `energies`).
  NonbondedEnergies compute(const PairList& list, const std::vector<Vec3>& x, bool energies, std::vector<Vec3>* f,
                            EntryRange range = {});
  // compute() in two halves, so the CPU works while the device does: launch starts the step; finish (the
  // same list and positions) waits for it and adds its forces to f.
  void launch(const PairList& list, const std::vector<Vec3>& x, bool energies, EntryRange range = {});
  NonbondedEnergies finish(const PairList& list, const std::vector<Vec3>& x, std::vector<Vec3>* f);
  int64_t list_uploads() const { return list_uploads_; }
  const gpu::NbDevice& device() const { return *device_; }

 private:
  const Topology& top_;
  std::unique_ptr<gpu::NbDevice> device_;
  int64_t list_build_ = -1, list_version_ = -1, list_uploads_ = 0;
  bool launched_ = false, energies_ = false;
  std::vector<float> slot_q_;  // per slot, the charge (padding 0)
  std::vector<float> xq_, f_;
  std::vector<double> sums_;
};

}  // namespace qk::md

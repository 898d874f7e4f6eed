// The non-bonded kernel on CUDA (nonbonded_gpu_device.h): one warp per pair-list
// entry, lane = 16 h + 4 ii + jj computing i-slot ii against j-slot jj of
// cluster pair base + h, so a pass does two cluster pairs. Per pass the j
// forces are summed over ii by shuffles and added atomically by the ii = 0
// lanes; at the entry's end the i forces are summed over jj and h, the
// energies over the warp, and added atomically. Float forces (GROMACS's GPU
// kernels are single precision), double energies and shift forces.
// host_nb_device() (nonbonded_gpu.cc) runs the same per-pair arithmetic and
// the same lane layout on the host for the tests that run without a GPU;
// its sums are ordered differently (in sequence, not by shuffles), nvcc
// fuses multiply-adds and the float atomics' order varies, so the two agree
// to a float's rounding, not bit for bit. Every rank uses the current
// device (device 0 unless the caller chose another): on a node of several
// GPUs, give each rank its own (CUDA_VISIBLE_DEVICES).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "md_cuda_memory.cuh"
#include "nonbonded_gpu_device.h"

namespace qk::md::gpu {

namespace {

constexpr unsigned kFull = 0xffffffffu;

void check(cudaError_t e, const char* what) { cuda_check(e, std::string("the non-bonded forces: ") + what); }

template <bool kEwald, bool kEnergy>
__global__ void nb_kernel(NbConsts k, const float4* __restrict__ xq, const int* __restrict__ type,
                          const float* __restrict__ c6, const float* __restrict__ c12,
                          const NbEntry* __restrict__ entries, int e0, int ne, const int* __restrict__ cj,
                          const unsigned short* __restrict__ mask, const float3* __restrict__ shifts,
                          float* __restrict__ f, int nslots, double* __restrict__ sums) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= ne) return;  // whole warps: blockDim is a multiple of 32
  const int lane = static_cast<int>(threadIdx.x & 31), h = lane >> 4, ii = (lane >> 2) & 3, jj = lane & 3;
  const NbEntry en = entries[e0 + warp];
  const int si = en.ci * 4 + ii;
  const float3 sv = shifts[en.shift];
  const float4 xi = xq[si];
  const float xix = xi.x - sv.x, xiy = xi.y - sv.y, xiz = xi.z - sv.z, qi = k.qfac * xi.w;
  const int ti = type[si] * k.ntypes;
  float fix = 0, fiy = 0, fiz = 0, vlj = 0, vc = 0;
  for (int base = en.begin; base < en.end; base += 2) {
    const int pr = base + h;
    const bool active = pr < en.end;
    float fx = 0, fy = 0, fz = 0;
    int sj = 0;
    if (active) {
      sj = cj[pr] * 4 + jj;
      const float4 xj = xq[sj];
      const float dx = xix - xj.x, dy = xiy - xj.y, dz = xiz - xj.z;
      const float r2 = dx * dx + dy * dy + dz * dz;
      if (((mask[pr] >> (lane & 15)) & 1u) && r2 < k.rc2) {
        const int t = ti + type[sj];
        const NbPair p = nb_pair<kEwald, kEnergy>(k, r2, qi * xj.w, c6[t], c12[t]);
        fx = p.fscal * dx;
        fy = p.fscal * dy;
        fz = p.fscal * dz;
        vlj += p.vlj;
        vc += p.vc;
      }
    }
    fix += fx;
    fiy += fy;
    fiz += fz;
    // The j-slot's force: minus the sum over the four i-slots (lanes 4 and 8 apart).
    for (int o = 4; o <= 8; o <<= 1) {
      fx += __shfl_xor_sync(kFull, fx, o);
      fy += __shfl_xor_sync(kFull, fy, o);
      fz += __shfl_xor_sync(kFull, fz, o);
    }
    if (active && ii == 0) {
      atomicAdd(&f[sj], -fx);
      atomicAdd(&f[nslots + sj], -fy);
      atomicAdd(&f[2 * nslots + sj], -fz);
    }
  }
  // The i-slot's force: the sum over jj (lanes 1, 2 apart) and both halves (16 apart).
  for (int o = 1; o <= 16; o = o == 2 ? 16 : 2 * o) {  // 1, 2, 16
    fix += __shfl_xor_sync(kFull, fix, o);
    fiy += __shfl_xor_sync(kFull, fiy, o);
    fiz += __shfl_xor_sync(kFull, fiz, o);
  }
  if (h == 0 && jj == 0) {
    atomicAdd(&f[si], fix);
    atomicAdd(&f[nslots + si], fiy);
    atomicAdd(&f[2 * nslots + si], fiz);
  }
  if constexpr (kEnergy) {
    // The entry's shift force: the i-forces summed over ii too (most entries share the central shift, so
    // one lane's three atomics instead of four lanes' twelve).
    for (int o = 4; o <= 8; o <<= 1) {
      fix += __shfl_xor_sync(kFull, fix, o);
      fiy += __shfl_xor_sync(kFull, fiy, o);
      fiz += __shfl_xor_sync(kFull, fiz, o);
    }
    if (lane == 0) {
      atomicAdd(&sums[2 + 3 * en.shift], static_cast<double>(fix));
      atomicAdd(&sums[3 + 3 * en.shift], static_cast<double>(fiy));
      atomicAdd(&sums[4 + 3 * en.shift], static_cast<double>(fiz));
    }
    for (int o = 16; o >= 1; o >>= 1) {
      vlj += __shfl_xor_sync(kFull, vlj, o);
      vc += __shfl_xor_sync(kFull, vc, o);
    }
    if (lane == 0) {
      atomicAdd(&sums[0], static_cast<double>(vlj));
      atomicAdd(&sums[1], static_cast<double>(vc));
    }
  }
}

class CudaNbDevice final : public NbDevice {
 public:
  CudaNbDevice() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream"); }
  ~CudaNbDevice() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::string name() const override {
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "cuda";
    return std::string("cuda:") + std::to_string(dev) + " (" + prop.name + ")";
  }
  void set_params(const NbConsts& k, const std::vector<float>& c6, const std::vector<float>& c12) override {
    k_ = k;
    c6_.upload(c6.data(), c6.size(), stream_, "uploading the LJ table");
    c12_.upload(c12.data(), c12.size(), stream_, "uploading the LJ table");
    sync();  // the host vectors may go
  }
  void set_types(const std::vector<int>& type) override {
    type_.upload(type.data(), type.size(), stream_, "uploading the slots' types");
    sync();
  }
  void set_list(const std::vector<NbEntry>& entries, const std::vector<int>& cj, const std::vector<uint16_t>& mask,
                const std::vector<float>& shifts) override {
    entries_.upload(entries.data(), entries.size(), stream_, "uploading the pair list");
    cj_.upload(cj.data(), cj.size(), stream_, "uploading the pair list");
    static_assert(sizeof(unsigned short) == sizeof(uint16_t));
    mask_.upload(reinterpret_cast<const unsigned short*>(mask.data()), mask.size(), stream_,
                 "uploading the pair list");
    shifts_.upload(reinterpret_cast<const float3*>(shifts.data()), shifts.size() / 3, stream_,
                   "uploading the shifts");
    sync();
  }
  // The positions go up, the kernel runs and the results come down into pinned buffers, all queued on the
  // stream: the host returns at once and works until finish().
  void launch(const std::vector<float>& xq, int64_t e0, int64_t e1, bool energies) override {
    nslots_ = xq.size() / 4;
    if (nslots_ == 0) return;
    host_xq_.reserve(4 * nslots_, "pinned positions");
    std::copy(xq.begin(), xq.end(), host_xq_.ptr);
    xq_.reserve(nslots_, "the positions");
    check(cudaMemcpyAsync(xq_.ptr, host_xq_.ptr, 4 * nslots_ * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "uploading the positions");
    f_.reserve(3 * nslots_, "the forces");
    sums_.reserve(kNbSums, "the energies");
    check(cudaMemsetAsync(f_.ptr, 0, 3 * nslots_ * sizeof(float), stream_), "zeroing the forces");
    check(cudaMemsetAsync(sums_.ptr, 0, kNbSums * sizeof(double), stream_), "zeroing the energies");
    const int ne = static_cast<int>(e1 - e0);
    if (ne > 0) {
      constexpr int kThreads = 128;  // 4 warps, 4 entries a block
      const unsigned blocks = static_cast<unsigned>((static_cast<int64_t>(ne) * 32 + kThreads - 1) / kThreads);
      const int n = static_cast<int>(nslots_), first = static_cast<int>(e0);
      (void)cudaGetLastError();  // an earlier call's error is not this launch's
      if (k_.ewald && energies) {
        nb_kernel<true, true><<<blocks, kThreads, 0, stream_>>>(k_, xq_.ptr, type_.ptr, c6_.ptr, c12_.ptr,
                                                                entries_.ptr, first, ne, cj_.ptr, mask_.ptr,
                                                                shifts_.ptr, f_.ptr, n, sums_.ptr);
      } else if (k_.ewald) {
        nb_kernel<true, false><<<blocks, kThreads, 0, stream_>>>(k_, xq_.ptr, type_.ptr, c6_.ptr, c12_.ptr,
                                                                 entries_.ptr, first, ne, cj_.ptr, mask_.ptr,
                                                                 shifts_.ptr, f_.ptr, n, sums_.ptr);
      } else if (energies) {
        nb_kernel<false, true><<<blocks, kThreads, 0, stream_>>>(k_, xq_.ptr, type_.ptr, c6_.ptr, c12_.ptr,
                                                                 entries_.ptr, first, ne, cj_.ptr, mask_.ptr,
                                                                 shifts_.ptr, f_.ptr, n, sums_.ptr);
      } else {
        nb_kernel<false, false><<<blocks, kThreads, 0, stream_>>>(k_, xq_.ptr, type_.ptr, c6_.ptr, c12_.ptr,
                                                                  entries_.ptr, first, ne, cj_.ptr, mask_.ptr,
                                                                  shifts_.ptr, f_.ptr, n, sums_.ptr);
      }
      check(cudaGetLastError(), "launching the kernel");
    }
    host_f_.reserve(3 * nslots_, "pinned forces");
    host_sums_.reserve(kNbSums, "pinned energies");
    check(cudaMemcpyAsync(host_f_.ptr, f_.ptr, 3 * nslots_ * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "downloading the forces");
    check(cudaMemcpyAsync(host_sums_.ptr, sums_.ptr, kNbSums * sizeof(double), cudaMemcpyDeviceToHost, stream_),
          "downloading the energies");
  }
  void finish(std::vector<float>* f, std::vector<double>* sums) override {
    f->assign(3 * nslots_, 0.0f);
    sums->assign(kNbSums, 0.0);
    if (nslots_ == 0) return;
    check(cudaStreamSynchronize(stream_), "running the kernel");
    std::copy(host_f_.ptr, host_f_.ptr + 3 * nslots_, f->data());
    std::copy(host_sums_.ptr, host_sums_.ptr + kNbSums, sums->data());
  }

 private:
  void sync() { check(cudaStreamSynchronize(stream_), "waiting for the stream"); }

  cudaStream_t stream_ = nullptr;
  NbConsts k_;
  DeviceArray<float> c6_, c12_, f_;
  DeviceArray<int> type_, cj_;
  DeviceArray<unsigned short> mask_;
  DeviceArray<NbEntry> entries_;
  DeviceArray<float3> shifts_;
  DeviceArray<float4> xq_;
  DeviceArray<double> sums_;
  PinnedArray<float> host_xq_, host_f_;
  PinnedArray<double> host_sums_;
  size_t nslots_ = 0;
};

}  // namespace

bool cuda_nb_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")"
                              : std::string("no CUDA device on this machine");
    return false;
  }
  return true;
}

std::unique_ptr<NbDevice> cuda_nb_device() {
  std::string why;
  if (!cuda_nb_available(&why)) nb_device_error("the non-bonded forces on a GPU: " + why + "; run them on the CPU (-nb cpu)");
  return std::make_unique<CudaNbDevice>();
}

}  // namespace qk::md::gpu

// PME on CUDA (pme_gpu_device.h): a thread per atom spreads its charge on
// the p^3 grid points from its first one (periodic, atomic adds), cuFFT's
// real-to-complex transform, a thread per k-point of the half-complex grid
// solves (energy and virial summed per warp, then atomically in double),
// cuFFT's complex-to-real transform, and a thread per atom gathers its
// force. The arithmetic is pme_gpu_math.h's, which pme_gpu.cc's host
// emulation runs too; cuFFT's transforms are unnormalized with the
// half-complex dimension last, as FFTW's and the emulation's.
#include <cuda_runtime.h>
#include <cufft.h>

#include <string>
#include <vector>

#include "md_cuda_memory.cuh"
#include "nonbonded_gpu_device.h"  // nb_device_error, cuda_nb_available
#include "pme_gpu_device.h"

namespace qk::md::gpu {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kPmeSolveThreads = 128;  // the solve's block (its energy sum uses one shared slot per warp)

void check(cudaError_t e, const char* what) { cuda_check(e, std::string("PME: ") + what); }
void check_fft(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) nb_device_error(std::string("PME on the GPU: ") + what + ": cuFFT error " + std::to_string(r));
}

__global__ void spread_kernel(PmeGrid g, const float* __restrict__ s, const float* __restrict__ q, int natoms,
                              float* __restrict__ grid) {
  const int a = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (a >= natoms || q[a] == 0) return;
  PmeAtomSplines sp;
  pme_atom_splines(g, &s[3 * a], &sp);
  for (int i = 0; i < g.order; ++i)
    for (int j = 0; j < g.order; ++j) {
      const float qxy = q[a] * sp.th[0][i] * sp.th[1][j];
      for (int k = 0; k < g.order; ++k)
        atomicAdd(&grid[pme_index(g, sp.first[0] + i, sp.first[1] + j, sp.first[2] + k)], qxy * sp.th[2][k]);
    }
}

template <bool kEnergy>
__global__ void solve_kernel(PmeGrid g, const float* __restrict__ eterm, cufftComplex* __restrict__ c,
                             double* __restrict__ sums) {
  const int nzc = g.nz / 2 + 1;
  const int64_t total = static_cast<int64_t>(g.nx) * g.ny * nzc;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  PmeKTerms t;
  if (idx < total) {
    const int kz = static_cast<int>(idx % nzc), ky = static_cast<int>((idx / nzc) % g.ny),
              kx = static_cast<int>(idx / (static_cast<int64_t>(nzc) * g.ny));
    float re = c[idx].x, im = c[idx].y;
    pme_solve_point(g, kx, ky, kz, eterm[idx], &re, &im, kEnergy, &t);
    c[idx].x = re;
    c[idx].y = im;
  }
  if constexpr (kEnergy) {
    // Every lane of the block reaches here (no early return above): summed per warp by shuffles, the warps
    // in shared memory, then one thread's seven atomic adds per block.
    __shared__ double part[kPmeSolveThreads / 32][7];
    double v[7] = {t.energy, t.vir[0], t.vir[1], t.vir[2], t.vir[3], t.vir[4], t.vir[5]};
    for (int k = 0; k < 7; ++k)
      for (int o = 16; o >= 1; o >>= 1) v[k] += __shfl_xor_sync(kFull, v[k], o);
    if ((threadIdx.x & 31) == 0)
      for (int k = 0; k < 7; ++k) part[threadIdx.x / 32][k] = v[k];
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 0; k < 7; ++k) {
        double sum = 0;
        for (int w = 0; w < kPmeSolveThreads / 32; ++w) sum += part[w][k];
        atomicAdd(&sums[k], sum);
      }
  }
}

__global__ void gather_kernel(PmeGrid g, const float* __restrict__ s, const float* __restrict__ q, int natoms,
                              const float* __restrict__ phi, float* __restrict__ f) {
  const int a = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (a >= natoms) return;
  if (q[a] == 0) {
    f[3 * a] = f[3 * a + 1] = f[3 * a + 2] = 0;
    return;
  }
  PmeAtomSplines sp;
  pme_atom_splines(g, &s[3 * a], &sp);
  const auto& th = sp.th;
  const auto& dth = sp.dth;
  float gx = 0, gy = 0, gz = 0;
  for (int i = 0; i < g.order; ++i)
    for (int j = 0; j < g.order; ++j)
      for (int k = 0; k < g.order; ++k) {
        const float p = phi[pme_index(g, sp.first[0] + i, sp.first[1] + j, sp.first[2] + k)];
        gx += dth[0][i] * th[1][j] * th[2][k] * p;
        gy += th[0][i] * dth[1][j] * th[2][k] * p;
        gz += th[0][i] * th[1][j] * dth[2][k] * p;
      }
  f[3 * a] = -q[a] * gx * (static_cast<float>(g.nx) * g.inv[0]);
  f[3 * a + 1] = -q[a] * gy * (static_cast<float>(g.ny) * g.inv[1]);
  f[3 * a + 2] = -q[a] * gz * (static_cast<float>(g.nz) * g.inv[2]);
}

class CudaPmeDevice final : public PmeDevice {
 public:
  CudaPmeDevice() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream"); }
  ~CudaPmeDevice() override {
    destroy_plans();
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::string name() const override {
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return "cuda";
    }
    return std::string("cuda:") + std::to_string(dev) + " (" + prop.name + ")";
  }
  void set_grid(const PmeGrid& g, const std::vector<float>& eterm) override {
    if (g.order < 3 || g.order > kPmeMaxOrder)
      nb_device_error("PME on a GPU: pme-order " + std::to_string(g.order) + " (3.." +
                      std::to_string(kPmeMaxOrder) + ")");
    const size_t nreal = static_cast<size_t>(g.nx) * g.ny * g.nz, ncomplex = static_cast<size_t>(g.nx) * g.ny * (g.nz / 2 + 1);
    if (g.nx < 1 || g.ny < 1 || g.nz < 1 || eterm.size() != ncomplex)
      nb_device_error("PME on a GPU: an influence function of " + std::to_string(eterm.size()) + " points for a " +
                      std::to_string(g.nx) + "x" + std::to_string(g.ny) + "x" + std::to_string(g.nz) + " grid");
    const bool new_size = g.nx != g_.nx || g.ny != g_.ny || g.nz != g_.nz || !planned_;
    if (new_size) destroy_plans();  // until the new ones stand, nothing runs on the old
    grid_.reserve(nreal, "the charge grid");
    kspace_.reserve(ncomplex, "the complex grid");
    eterm_.reserve(ncomplex, "the influence function");
    check(cudaMemcpyAsync(eterm_.ptr, eterm.data(), ncomplex * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "uploading the influence function");
    if (new_size) {
      check_fft(cufftPlan3d(&forward_, g.nx, g.ny, g.nz, CUFFT_R2C), "planning the forward transform");
      const cufftResult r = cufftPlan3d(&backward_, g.nx, g.ny, g.nz, CUFFT_C2R);
      if (r != CUFFT_SUCCESS) cufftDestroy(forward_);
      check_fft(r, "planning the backward transform");
      planned_ = true;
      check_fft(cufftSetStream(forward_, stream_), "the forward transform's stream");
      check_fft(cufftSetStream(backward_, stream_), "the backward transform's stream");
    }
    check(cudaStreamSynchronize(stream_), "uploading the influence function");
    g_ = g;  // only now: a grid that failed on the way is not taken for one that stands
  }
  void run(const std::vector<float>& s, const std::vector<float>& q, bool energies, std::vector<float>* f,
           std::vector<double>* sums) override {
    const int natoms = static_cast<int>(q.size());
    f->assign(3 * q.size(), 0.0f);
    sums->assign(kPmeSums, 0.0);
    if (natoms == 0) return;
    if (!planned_ || g_.nx < 1) nb_device_error("PME on a GPU: a step before its grid was set");
    const size_t nreal = static_cast<size_t>(g_.nx) * g_.ny * g_.nz;
    const size_t ncomplex = static_cast<size_t>(g_.nx) * g_.ny * (g_.nz / 2 + 1);
    s_.reserve(s.size(), "the coordinates");
    q_.reserve(q.size(), "the charges");
    f_.reserve(3 * q.size(), "the forces");
    sums_.reserve(kPmeSums, "the energy");
    check(cudaMemcpyAsync(s_.ptr, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "uploading the coordinates");
    check(cudaMemcpyAsync(q_.ptr, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "uploading the charges");
    check(cudaMemsetAsync(grid_.ptr, 0, nreal * sizeof(float), stream_), "zeroing the grid");
    check(cudaMemsetAsync(sums_.ptr, 0, kPmeSums * sizeof(double), stream_), "zeroing the energy");
    (void)cudaGetLastError();  // an earlier call's error is not these launches'
    constexpr int kThreads = 128;
    const unsigned atom_blocks = static_cast<unsigned>((natoms + kThreads - 1) / kThreads);
    spread_kernel<<<atom_blocks, kThreads, 0, stream_>>>(g_, s_.ptr, q_.ptr, natoms, grid_.ptr);
    check(cudaGetLastError(), "launching the spreading");
    check_fft(cufftExecR2C(forward_, grid_.ptr, kspace_.ptr), "the forward transform");
    const unsigned k_blocks = static_cast<unsigned>((ncomplex + kPmeSolveThreads - 1) / kPmeSolveThreads);
    if (energies) {
      solve_kernel<true><<<k_blocks, kPmeSolveThreads, 0, stream_>>>(g_, eterm_.ptr, kspace_.ptr, sums_.ptr);
    } else {
      solve_kernel<false><<<k_blocks, kPmeSolveThreads, 0, stream_>>>(g_, eterm_.ptr, kspace_.ptr, sums_.ptr);
    }
    check(cudaGetLastError(), "launching the solve");
    check_fft(cufftExecC2R(backward_, kspace_.ptr, grid_.ptr), "the backward transform");
    gather_kernel<<<atom_blocks, kThreads, 0, stream_>>>(g_, s_.ptr, q_.ptr, natoms, grid_.ptr, f_.ptr);
    check(cudaGetLastError(), "launching the gathering");
    check(cudaMemcpyAsync(f->data(), f_.ptr, 3 * q.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "downloading the forces");
    check(cudaMemcpyAsync(sums->data(), sums_.ptr, kPmeSums * sizeof(double), cudaMemcpyDeviceToHost, stream_),
          "downloading the energy");
    check(cudaStreamSynchronize(stream_), "running PME");
  }

 private:
  void destroy_plans() {
    if (planned_) {
      cufftDestroy(forward_);
      cufftDestroy(backward_);
    }
    planned_ = false;
  }

  cudaStream_t stream_ = nullptr;
  PmeGrid g_;
  cufftHandle forward_ = 0, backward_ = 0;
  bool planned_ = false;
  DeviceArray<float> grid_, eterm_, s_, q_, f_;
  DeviceArray<cufftComplex> kspace_;
  DeviceArray<double> sums_;
};

}  // namespace

std::unique_ptr<PmeDevice> cuda_pme_device() {
  std::string why;
  if (!cuda_nb_available(&why)) nb_device_error("PME on a GPU: " + why + "; run it on the CPU (-pme cpu)");
  return std::make_unique<CudaPmeDevice>();
}

}  // namespace qk::md::gpu

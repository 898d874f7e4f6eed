#include "optimizer_steps.h"

namespace qk::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }

template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T wd, T mom, T damp, bool momentum_on,
                           bool nesterov, bool first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T d = g[i] + wd * p[i];
    if (momentum_on) {
      T b = first ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, T step_size, T inv_bc2_sqrt, T b1, T b2,
                            T omb1, T omb2, T eps, T wd, T decay, bool decoupled, bool amsgrad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T x = p[i];
    T d = g[i];
    if (decoupled) x *= decay;
    else d += wd * x;
    T mi = b1 * m[i] + omb1 * d;
    T vi = b2 * v[i] + omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    T vu = vi;
    if (amsgrad) {
      vu = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vu;
    }
    p[i] = x - step_size * mi / (m_sqrt(vu) * inv_bc2_sqrt + eps);
  }
}

template <typename T>
void sgd_as(void* p, const void* g, void* buf, int64_t n, const SgdConsts& c, cudaStream_t s) {
  sgd_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(buf), n,
                                                 T(c.lr), T(c.weight_decay), T(c.momentum), T(c.damp), c.momentum_on,
                                                 c.nesterov, c.first_step);
}

template <typename T>
void adam_as(void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamConsts& c, cudaStream_t s) {
  adam_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(m),
                                                  static_cast<T*>(v), static_cast<T*>(vmax), n, T(c.step_size),
                                                  T(c.inv_bc2_sqrt), T(c.b1), T(c.b2), T(c.omb1), T(c.omb2), T(c.eps),
                                                  T(c.wd), T(c.decay), c.decoupled, c.amsgrad);
}

}  // namespace

void launch_sgd_step(bool f64, void* p, const void* g, void* buf, int64_t n, const SgdConsts& c, cudaStream_t s) {
  if (n <= 0) return;
  if (f64) sgd_as<double>(p, g, buf, n, c, s);
  else sgd_as<float>(p, g, buf, n, c, s);
}

void launch_adam_step(bool f64, void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamConsts& c,
                      cudaStream_t s) {
  if (n <= 0) return;
  if (f64) adam_as<double>(p, g, m, v, vmax, n, c, s);
  else adam_as<float>(p, g, m, v, vmax, n, c, s);
}

}  // namespace qk::cuda

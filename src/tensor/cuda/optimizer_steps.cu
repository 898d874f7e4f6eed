#include "multi_tensor_list.cuh"
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

// The step's constants in the parameter's dtype.
template <typename T>
struct SgdParams {
  T lr, wd, mom, damp;
  bool momentum_on, nesterov, first;
};
template <typename T>
struct AdamParams {
  T step_size, inv_bc2_sqrt, b1, b2, omb1, omb2, eps, wd, decay;
  bool decoupled, amsgrad;
};

// Element i's update: one parameter's kernel and the list kernel share it,
// so both give the same bits.
template <typename T>
__device__ __forceinline__ void sgd_at(int64_t i, T* p, const T* g, T* buf, const SgdParams<T>& c) {
  T d = g[i] + c.wd * p[i];
  if (c.momentum_on) {
    T b = c.first ? d : c.mom * buf[i] + c.damp * d;
    buf[i] = b;
    d = c.nesterov ? d + c.mom * b : b;
  }
  p[i] -= c.lr * d;
}

template <typename T>
__device__ __forceinline__ void adam_at(int64_t i, T* p, const T* g, T* m, T* v, T* vmax, const AdamParams<T>& c) {
  T x = p[i];
  T d = g[i];
  if (c.decoupled) x *= c.decay;
  else d += c.wd * x;
  T mi = c.b1 * m[i] + c.omb1 * d;
  T vi = c.b2 * v[i] + c.omb2 * d * d;
  m[i] = mi;
  v[i] = vi;
  T vu = vi;
  if (c.amsgrad) {
    vu = vmax[i] > vi ? vmax[i] : vi;
    vmax[i] = vu;
  }
  p[i] = x - c.step_size * mi / (m_sqrt(vu) * c.inv_bc2_sqrt + c.eps);
}

template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, SgdParams<T> c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    sgd_at(i, p, g, buf, c);
}

template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, AdamParams<T> c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adam_at(i, p, g, m, v, vmax, c);
}

// Lists: 0 params, 1 grads, 2 momentum buffers.
template <typename T>
__global__ void multi_sgd_kernel(ChunkedTensorList<3> l, SgdParams<T> c) {
  int64_t lo = 0, hi = 0;
  const int t = tensor_of_block(l, &lo, &hi);
  T* p = static_cast<T*>(l.data[0][t]);
  const T* g = static_cast<const T*>(l.data[1][t]);
  T* buf = static_cast<T*>(l.data[2][t]);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) sgd_at(i, p, g, buf, c);
}

// Lists: 0 params, 1 grads, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq.
template <typename T>
__global__ void multi_adam_kernel(ChunkedTensorList<5> l, AdamParams<T> c) {
  int64_t lo = 0, hi = 0;
  const int t = tensor_of_block(l, &lo, &hi);
  T* p = static_cast<T*>(l.data[0][t]);
  const T* g = static_cast<const T*>(l.data[1][t]);
  T* m = static_cast<T*>(l.data[2][t]);
  T* v = static_cast<T*>(l.data[3][t]);
  T* vmax = static_cast<T*>(l.data[4][t]);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) adam_at(i, p, g, m, v, vmax, c);
}

template <typename T>
SgdParams<T> sgd_params(const SgdConsts& c) {
  return {T(c.lr), T(c.weight_decay), T(c.momentum), T(c.damp), c.momentum_on, c.nesterov, c.first_step};
}
template <typename T>
AdamParams<T> adam_params(const AdamConsts& c) {
  return {T(c.step_size), T(c.inv_bc2_sqrt), T(c.b1), T(c.b2), T(c.omb1), T(c.omb2), T(c.eps), T(c.wd), T(c.decay),
          c.decoupled, c.amsgrad};
}

template <typename T>
void multi_sgd_as(void* const* const* ptrs, const int64_t* n, int count, const SgdConsts& c, cudaStream_t s) {
  ChunkedTensorList<3> l;
  const int64_t blocks = make_chunked_list(ptrs, n, count, l);
  if (blocks > 0) multi_sgd_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(l, sgd_params<T>(c));
}

template <typename T>
void multi_adam_as(void* const* const* ptrs, const int64_t* n, int count, const AdamConsts& c, cudaStream_t s) {
  ChunkedTensorList<5> l;
  const int64_t blocks = make_chunked_list(ptrs, n, count, l);
  if (blocks > 0) multi_adam_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(l, adam_params<T>(c));
}

}  // namespace

void launch_sgd_step(bool f64, void* p, const void* g, void* buf, int64_t n, const SgdConsts& c, cudaStream_t s) {
  if (n <= 0) return;
  if (f64)
    sgd_kernel<double><<<grid_for(n), kThreads, 0, s>>>(static_cast<double*>(p), static_cast<const double*>(g),
                                                        static_cast<double*>(buf), n, sgd_params<double>(c));
  else
    sgd_kernel<float><<<grid_for(n), kThreads, 0, s>>>(static_cast<float*>(p), static_cast<const float*>(g),
                                                       static_cast<float*>(buf), n, sgd_params<float>(c));
}

void launch_adam_step(bool f64, void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamConsts& c,
                      cudaStream_t s) {
  if (n <= 0) return;
  if (f64)
    adam_kernel<double><<<grid_for(n), kThreads, 0, s>>>(
        static_cast<double*>(p), static_cast<const double*>(g), static_cast<double*>(m), static_cast<double*>(v),
        static_cast<double*>(vmax), n, adam_params<double>(c));
  else
    adam_kernel<float><<<grid_for(n), kThreads, 0, s>>>(static_cast<float*>(p), static_cast<const float*>(g),
                                                        static_cast<float*>(m), static_cast<float*>(v),
                                                        static_cast<float*>(vmax), n, adam_params<float>(c));
}

void launch_multi_sgd_step(bool f64, void* const* const* ptrs, const int64_t* n, int count, const SgdConsts& c,
                           cudaStream_t s) {
  if (f64) multi_sgd_as<double>(ptrs, n, count, c, s);
  else multi_sgd_as<float>(ptrs, n, count, c, s);
}

void launch_multi_adam_step(bool f64, void* const* const* ptrs, const int64_t* n, int count, const AdamConsts& c,
                            cudaStream_t s) {
  if (f64) multi_adam_as<double>(ptrs, n, count, c, s);
  else multi_adam_as<float>(ptrs, n, count, c, s);
}

}  // namespace qk::cuda

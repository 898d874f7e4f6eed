// Inverted dropout on the CPU. Element i keeps its value (scaled by 1/(1-p))
// when word i % 4 of Philox(seed, offset + i / 4) maps below 1-p, so the mask
// depends only on (seed, offset), never on the thread count. Counters are
// generated 16 at a time, lane-parallel.
#include "cpu/dropout.h"

#include "qk/base/thread_pool.h"
#include "qk/tensor/generator.h"
#include "cpu/norm_lanes.h"

namespace qk::cpu {
namespace {

// Philox-4x32-10 for kBatch consecutive counters at once, word for word
// equal to qk::philox4x32 (checked by Dropout.BatchedPhiloxMatchesReference),
// written lane-parallel so that the rounds vectorize (32x32->64 multiplies)
// instead of running one dependent chain per call.
constexpr int kBatch = 16;

// out[4 * l + w] = word w of counter + l: element order.
void philox_batch(uint64_t seed, uint64_t counter, uint32_t out[4 * kBatch]) {
  uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  for (int l = 0; l < kBatch; ++l) {
    const uint64_t c = counter + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(c);
    c1[l] = static_cast<uint32_t>(c >> 32);
    c2[l] = 0;
    c3[l] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma GCC unroll 1
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int l = 0; l < kBatch; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int l = 0; l < kBatch; ++l) {
    out[4 * l] = c0[l];
    out[4 * l + 1] = c1[l];
    out[4 * l + 2] = c2[l];
    out[4 * l + 3] = c3[l];
  }
}

template <typename T>
void dropout_impl(const T* xp, T* op, T* mp, int64_t n, double p, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  // keep iff the top 24 bits, as a fraction of 2^24, are < 1 - p.
  const uint32_t keep_below = static_cast<uint32_t>((1.0 - p) * 16777216.0);
  const A scale = p < 1 ? static_cast<A>(1.0 / (1.0 - p)) : A(0);
  const int64_t groups = (n + 3) / 4;  // one Philox counter per 4 elements
  const int64_t batches = (groups + kBatch - 1) / kBatch;
  parallel_for(0, batches, 64, [&](int64_t lo, int64_t hi) {
    uint32_t bits[4 * kBatch];
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t g0 = bt * kBatch;
      philox_batch(seed, offset + static_cast<uint64_t>(g0), bits);
      const int64_t i0 = g0 * 4, len = std::min<int64_t>(4 * kBatch, n - i0);
      const T* x = xp + i0;
      T* o = op + i0;
      T* mk = mp + i0;
      // Branch-free (a 50% keep rate would mispredict every other element).
      for (int64_t k = 0; k < len; ++k) {
        const A m = scale * static_cast<A>((bits[k] >> 8) < keep_below);
        st(mk, k, m);
        st(o, k, ld<A>(x, k) * m);
      }
    }
  });
}

}  // namespace

std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                  const Tensor& offset_base) {
  if (offset_base.defined()) offset += static_cast<uint64_t>(offset_base.data_ptr<int64_t>()[0]);
  Tensor out = empty(x.shape(), x.dtype()), mask = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_impl<T>(x.data_ptr<T>(), out.data_ptr<T>(), mask.data_ptr<T>(), x.numel(), p, seed,
                    offset);
  });
  return {out, mask};
}

}  // namespace qk::cpu

// Philox-4x32-10 random numbers (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11): counter-based, so a fill is split across threads
// without changing its values.
#include "qk/tensor/generator.h"

#include <cmath>
#include <numeric>

#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"

namespace qk {

void philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

Generator& default_generator(Device d) {
  static Generator gens[kNumDeviceTypes];
  return gens[static_cast<int>(d.type)];
}

void manual_seed(uint64_t seed) {
  for (int i = 0; i < kNumDeviceTypes; ++i) default_generator(Device(static_cast<DeviceType>(i))).manual_seed(seed);
}

namespace {

inline double u32_to_unit(uint32_t x) { return (x >> 8) * (1.0 / 16777216.0); }  // [0,1), 24 bits
inline double u64_to_unit(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

// Fills a contiguous host buffer of n values; value(i, words) gets the four
// Philox words of counter (base + i/2) for element pairs (two per counter),
// which keeps Box-Muller pairs together.
template <typename F>
void fill_host(int64_t n, Generator& gen, F&& write_pair) {
  int64_t pairs = (n + 1) / 2;
  uint64_t base = gen.advance(static_cast<uint64_t>(pairs));
  uint64_t seed = gen.seed();
  // Grain: not measured (docs/tensor.md, "Threads").
  parallel_for(0, pairs, 4096, [&](int64_t lo, int64_t hi) {
    uint32_t w[4];
    for (int64_t p = lo; p < hi; ++p) {
      philox4x32(seed, base + static_cast<uint64_t>(p), w);
      write_pair(2 * p, w);
    }
  });
}

// Runs a host fill and copies into t (any layout, any device).
template <typename F>
void fill_tensor(const Tensor& t, Generator& gen, F&& gen_pair) {
  int64_t n = t.numel();
  if (n == 0) return;
  Tensor host = empty(t.shape(), TensorOptions().dtype(DType::f64));
  double* p = host.data_ptr<double>();
  fill_host(n, gen, [&](int64_t i, const uint32_t* w) {
    double a, b;
    gen_pair(w, a, b);
    p[i] = a;
    if (i + 1 < n) p[i + 1] = b;
  });
  ops::copy_(t, host);
}

}  // namespace

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  QK_CHECK(low <= high, "uniform_: low ", low, " > high ", high);
  fill_tensor(t, gen, [=](const uint32_t* w, double& a, double& b) {
    a = low + (high - low) * u64_to_unit(w[0], w[1]);
    b = low + (high - low) * u64_to_unit(w[2], w[3]);
  });
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  QK_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  fill_tensor(t, gen, [=](const uint32_t* w, double& a, double& b) {
    // Box-Muller on two 53-bit uniforms; 1-u keeps log away from 0.
    double u1 = 1.0 - u64_to_unit(w[0], w[1]);
    double u2 = u64_to_unit(w[2], w[3]);
    double r = std::sqrt(-2.0 * std::log(u1));
    a = mean + std * r * std::cos(2.0 * M_PI * u2);
    b = mean + std * r * std::sin(2.0 * M_PI * u2);
  });
}

void bernoulli_(const Tensor& t, double p, Generator& gen) {
  QK_CHECK(p >= 0 && p <= 1, "bernoulli_: probability must be in [0, 1], got ", p);
  fill_tensor(t, gen, [=](const uint32_t* w, double& a, double& b) {
    a = u32_to_unit(w[0]) < p ? 1.0 : 0.0;
    b = u32_to_unit(w[1]) < p ? 1.0 : 0.0;
  });
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator& gen) {
  Tensor t = empty(shape, opts);
  uniform_(t, 0.0, 1.0, gen);
  return t;
}
Tensor rand(const Shape& shape, TensorOptions opts) { return rand(shape, opts, default_generator(opts.device_)); }

Tensor randn(const Shape& shape, TensorOptions opts, Generator& gen) {
  Tensor t = empty(shape, opts);
  normal_(t, 0.0, 1.0, gen);
  return t;
}
Tensor randn(const Shape& shape, TensorOptions opts) { return randn(shape, opts, default_generator(opts.device_)); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator& gen) {
  QK_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  Tensor t = empty(shape, opts);
  const double span = static_cast<double>(high - low);
  fill_tensor(t, gen, [=](const uint32_t* w, double& a, double& b) {
    a = static_cast<double>(low + static_cast<int64_t>(std::floor(u64_to_unit(w[0], w[1]) * span)));
    b = static_cast<double>(low + static_cast<int64_t>(std::floor(u64_to_unit(w[2], w[3]) * span)));
  });
  return t;
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts) {
  return randint(low, high, shape, opts, default_generator(opts.device_));
}

Tensor randperm(int64_t n, Generator& gen) {
  QK_CHECK(n >= 0, "randperm: n must be >= 0, got ", n);
  Tensor t = empty({n}, DType::i64);
  int64_t* p = t.data_ptr<int64_t>();
  std::iota(p, p + n, int64_t{0});
  // Fisher-Yates with one counter per swap.
  uint64_t base = gen.advance(static_cast<uint64_t>(std::max<int64_t>(n, 1)));
  uint32_t w[4];
  for (int64_t i = n - 1; i > 0; --i) {
    philox4x32(gen.seed(), base + static_cast<uint64_t>(i), w);
    auto j = static_cast<int64_t>(u64_to_unit(w[0], w[1]) * static_cast<double>(i + 1));
    std::swap(p[i], p[j]);
  }
  return t;
}
Tensor randperm(int64_t n) { return randperm(n, default_generator()); }

}  // namespace qk

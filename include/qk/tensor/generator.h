// Seedable random numbers, one generator per device.
//
//   qk::manual_seed(42);                       // every device's default generator
//   auto x = qk::randn({4, 4});
//   qk::Generator g(7);  auto y = qk::rand({3}, {}, g);
//
// Counter-based (Philox-4x32-10): element i of a fill draws from counter
// offset + i, so results do not depend on the thread count, and the whole
// state is (seed, offset): two integers to save in a checkpoint.
#pragma once

#include <cstdint>
#include <mutex>

#include "qk/tensor/tensor.h"

namespace qk {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n 128-bit counters; returns the first.
  uint64_t advance(uint64_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }
  std::mutex& mutex() { return mu_; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::mutex mu_;
};

// A draw of n counters inside a device-graph capture (qk::capture_graph):
// a kernel recorded with a fixed offset would repeat its numbers at every
// replay, so its counter is relative + *base, base an i64 [1] on the device
// that each replay sets first (the generator then moves on as eager calls
// would move it). For kernels that take a counter base; throws InternalError
// when no capture of this thread records `device`.
struct GraphCounter {
  Tensor base;
  uint64_t relative = 0;
};
GraphCounter graph_rng_counter(Generator& gen, uint64_t n, Device device);

// Four 32-bit random words for (seed, counter).
void philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]);

Generator& default_generator(Device d = kCPU);
void manual_seed(uint64_t seed);

// Uniform [0,1), standard normal, integers in [low, high).
Tensor rand(const Shape& shape, TensorOptions opts = {});
Tensor rand(const Shape& shape, TensorOptions opts, Generator& gen);
Tensor randn(const Shape& shape, TensorOptions opts = {});
Tensor randn(const Shape& shape, TensorOptions opts, Generator& gen);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = DType::i64);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator& gen);
// A random permutation of 0..n-1 (i64).
Tensor randperm(int64_t n, Generator& gen);
Tensor randperm(int64_t n);

// In-place fills (no autograd), for initialisers.
void uniform_(const Tensor& t, double low, double high, Generator& gen);
void normal_(const Tensor& t, double mean, double std, Generator& gen);
// 1 with probability p else 0, in t's dtype.
void bernoulli_(const Tensor& t, double p, Generator& gen);

}  // namespace qk

// Random numbers in a recorded device graph (capture_graph, qk/tensor/backend.h):
// a dropout kernel recorded with a fixed counter offset would draw the same
// mask at every replay. So, during a capture, a generator's draws are
// offsets relative to a device counter base (an i64 [1] the recorded kernel
// reads when it runs, as PyTorch's graph-safe Philox state); before each
// replay the base is set to the generator's offset and the generator moves
// on by what the capture drew, so replay k draws what eager step k would.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/tensor.h"

namespace qk {

// (graph_rng_counter, GraphCounter: qk/tensor/generator.h.)

// One capture's generators (made current for the capture by capture_graph).
class GraphRng {
 public:
  explicit GraphRng(Device device) : device_(device) {}
  // Draws during the capture; the generators go back to where the capture
  // found them at end() (the first replay draws what the capture reserved).
  GraphCounter draw(Generator& gen, uint64_t n);
  void end();
  bool empty() const { return used_.empty(); }
  // Before a replay, on the device's current stream: each base := its
  // generator's offset, which then moves on by the capture's draws.
  void before_replay();

 private:
  struct Used {
    Generator* gen;
    uint64_t seed, start, drawn = 0;
    Tensor base;
  };
  Device device_;
  std::vector<Used> used_;
};

// Makes `rng` the calling thread's capture for a scope.
class GraphRngScope {
 public:
  explicit GraphRngScope(GraphRng* rng);
  ~GraphRngScope();
  GraphRngScope(const GraphRngScope&) = delete;
  GraphRngScope& operator=(const GraphRngScope&) = delete;

 private:
  GraphRng* prev_;
};

}  // namespace qk

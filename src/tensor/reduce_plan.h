// How a GPU backend reduces over some dimensions of a tensor without copying
// it: the reduced dimensions of a contiguous tensor, when they sit next to
// each other in memory, are the middle of an [outer, n, inner] array; the
// reduction then runs over n in `splits` parts so that a reduction with few
// outputs (a whole-tensor sum, a bias gradient's sum over the tokens) still
// has enough thread blocks to fill the device. The parts are summed in a
// fixed order afterwards, so results repeat run to run. Plain C++: the plan
// is tested without a GPU (tests/tensor/reduce_plan_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace qk {

struct ReduceShape {
  int64_t outer = 1;  // kept dimensions before the reduced ones
  int64_t n = 1;      // the reduced elements per output
  int64_t inner = 1;  // kept dimensions after the reduced ones
};

// The reduced dims of a contiguous tensor of `shape` as one middle block, or
// nullopt when kept dims lie between them (the caller copies then). Dims of
// size 1 may sit anywhere.
std::optional<ReduceShape> reduce_as_middle(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims);

// The kernels' thread blocks (the CUDA backend's reduce.cu): rows (inner == 1)
// take one block of kReduceBlockThreads threads per part of a row; columns
// (inner > 1) blocks of kReduceTileCols x kReduceTileRows threads per part of
// kReduceTileCols columns.
inline constexpr int64_t kReduceBlockThreads = 256;
inline constexpr int64_t kReduceTileCols = 32;
inline constexpr int64_t kReduceTileRows = 8;

struct ReducePlan {
  int64_t splits = 1;  // parts of n per output (1: no second pass)
  int64_t span = 0;    // reduced elements per part; splits * span >= n
  int64_t blocks = 0;  // thread blocks of the first pass
};

// Parts enough for about four blocks per multiprocessor in all, none smaller
// than 16 elements per thread, at most 1024.
ReducePlan plan_reduce(const ReduceShape& s, int64_t multiprocessors);

}  // namespace qk

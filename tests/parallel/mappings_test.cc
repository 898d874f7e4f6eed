// The tensor- and sequence-parallel mappings on 2 ranks: forward values and
// the gradients their backward produces, exactly (small integers).
#include <gtest/gtest.h>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/mappings.h"

namespace {

using qk::Tensor;
using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_equal;
namespace par = qk::parallel;

// [rows, cols] with element (i, j) = base + 10 i + j.
Tensor grid(int64_t rows, int64_t cols, double base = 0) {
  Tensor t = qk::empty({rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t.data_ptr<float>()[i * cols + j] = float(base + 10 * i + j);
  return t;
}

Tensor leaf(const Tensor& t) {
  Tensor x = t.clone();
  x.requires_grad_(true);
  return x;
}

TEST(TensorParallelMappings, CopyAndReduceAreConjugate) {
  auto r = on_tp_ranks(2, "map-copy", [](int rank, const Group& tp) {
    // copy_to: identity forward, gradients summed over the ranks.
    Tensor x = leaf(grid(2, 3));
    Tensor y = par::copy_to_tensor_model_parallel_region(x, *tp);
    require_equal(y, grid(2, 3), "copy_to forward");
    qk::sum(y * double(rank + 1)).backward();
    require_equal(x.grad(), qk::full({2, 3}, 3.0), "copy_to backward (1 + 2)");

    // reduce_from: sum over the ranks forward, identity backward.
    Tensor a = leaf(qk::full({4}, double(rank + 1)));
    Tensor b = par::reduce_from_tensor_model_parallel_region(a, *tp);
    require_equal(b, qk::full({4}, 3.0), "reduce_from forward");
    REQUIRE(a.data_ptr<float>()[0] == float(rank + 1), "reduce_from changed its input");
    qk::sum(b * double(rank + 5)).backward();
    require_equal(a.grad(), qk::full({4}, double(rank + 5)), "reduce_from backward");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMappings, ScatterAndGatherAlongTheLastDim) {
  auto r = on_tp_ranks(2, "map-scatter", [](int rank, const Group& tp) {
    Tensor x = leaf(grid(2, 4));
    Tensor mine = par::scatter_to_tensor_model_parallel_region(x, *tp);
    require_equal(mine, grid(2, 4).narrow(1, 2 * rank, 2), "scatter forward");
    // Backward all-gathers: rank r's upstream gradient lands in columns 2r, 2r+1.
    qk::sum(mine * double(rank + 1)).backward();
    Tensor want = qk::cat({qk::full({2, 2}, 1.0), qk::full({2, 2}, 2.0)}, 1);
    require_equal(x.grad(), want, "scatter backward");

    Tensor part = leaf(grid(2, 2, 100 * rank));
    Tensor all = par::gather_from_tensor_model_parallel_region(part, *tp);
    require_equal(all, qk::cat({grid(2, 2), grid(2, 2, 100)}, 1), "gather forward");
    qk::sum(all * grid(2, 4)).backward();  // backward keeps this rank's columns
    require_equal(part.grad(), grid(2, 4).narrow(1, 2 * rank, 2), "gather backward");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMappings, SequenceParallelAlongTheSequenceDim) {
  auto r = on_tp_ranks(2, "map-seq", [](int rank, const Group& tp) {
    // [B=2, T=4, C=3]: element (b, t, c) = 100 b + 10 t + c.
    Tensor full = grid(8, 3).reshape({2, 4, 3});
    Tensor x = leaf(full);
    Tensor mine = par::scatter_to_sequence_parallel_region(x, *tp, 1);
    require_equal(mine, full.narrow(1, 2 * rank, 2), "scatter forward");
    qk::sum(mine).backward();
    Tensor want = qk::ones({2, 4, 3});  // each rank's slice got ones
    require_equal(x.grad(), want, "scatter backward");

    // gather: all-gather forward; backward reduce-scatters the (different
    // per rank) upstream gradients: this rank's slice of their sum.
    Tensor shard = leaf(full.narrow(1, 2 * rank, 2).contiguous());
    Tensor gathered = par::gather_from_sequence_parallel_region(shard, *tp, 1);
    require_equal(gathered, full, "gather forward");
    qk::sum(gathered * full * double(rank + 1)).backward();
    require_equal(shard.grad(), full.narrow(1, 2 * rank, 2) * 3.0, "gather backward (reduce-scatter)");
    // Without a tensor-parallel consumer the gradient is just this rank's slice.
    Tensor shard2 = leaf(full.narrow(1, 2 * rank, 2).contiguous());
    Tensor g2 = par::gather_from_sequence_parallel_region(shard2, *tp, 1, /*tensor_parallel_output_grad=*/false);
    qk::sum(g2 * full * double(rank + 1)).backward();
    require_equal(shard2.grad(), full.narrow(1, 2 * rank, 2) * double(rank + 1), "gather backward (slice)");

    // reduce-scatter: the sum over ranks, this rank's slice; backward all-gathers.
    Tensor p = leaf(full * double(rank + 1));
    Tensor rs = par::reduce_scatter_to_sequence_parallel_region(p, *tp, 1);
    require_equal(rs, full.narrow(1, 2 * rank, 2) * 3.0, "reduce_scatter forward");
    qk::sum(rs * double(rank + 1)).backward();
    Tensor want_p = qk::cat({qk::full({2, 2, 3}, 1.0), qk::full({2, 2, 3}, 2.0)}, 1);
    require_equal(p.grad(), want_p, "reduce_scatter backward");

    // Along dim 0 too (Megatron's [s, b, h]).
    Tensor rs0 = par::reduce_scatter_along(full, *tp, 0);
    require_equal(rs0, full.narrow(0, rank, 1) * 2.0, "reduce_scatter_along dim 0");
    require_equal(par::all_gather_along(rs0, *tp, 0), full * 2.0, "all_gather_along dim 0");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMappings, AGroupOfOneIsTheIdentity) {
  auto r = on_tp_ranks(1, "map-one", [](int, const Group& tp) {
    Tensor x = leaf(grid(2, 4));
    Tensor y = par::gather_from_tensor_model_parallel_region(
        par::scatter_to_tensor_model_parallel_region(par::copy_to_tensor_model_parallel_region(x, *tp), *tp), *tp);
    qk::sum(par::reduce_from_tensor_model_parallel_region(y, *tp) * 2.0).backward();
    require_equal(x.grad(), qk::full({2, 4}, 2.0), "size-1 backward");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TensorParallelMappings, UnevenSplitsAreRefused) {
  auto r = on_tp_ranks(2, "map-uneven", [](int, const Group& tp) {
    bool threw = false;
    try {
      par::scatter_to_tensor_model_parallel_region(grid(2, 3), *tp);
    } catch (const qk::ValueError& e) {
      threw = std::string(e.what()).find("does not split evenly over the 2 ranks") != std::string::npos;
    }
    REQUIRE(threw, "a last dim of 3 was split over 2 ranks");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

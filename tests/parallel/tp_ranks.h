// Forked ranks forming one tensor-parallel group (through ParallelState, as a
// training run builds it), and comparisons for the TP-vs-unsplit tests.
//
//   auto r = qk_tp_test::on_tp_ranks(2, "col", [](int rank, const qk_tp_test::Group& tp) {
//     ... build the unsplit reference and the parallel layer from the same seed ...
//     qk_tp_test::require_close(parallel_out, reference_out, 1e-6, "forward");
//   });
//   EXPECT_TRUE(r.ok()) << r.summary();
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "dist/dist_ranks.h"
#include "qk/parallel/parallel_state.h"
#include "qk/tensor/ops/view.h"

namespace qk_tp_test {

using Group = std::shared_ptr<qk::dist::ProcessGroup>;

// n ranks, all in one tensor-parallel group of size n.
// Two to four ranks share the machine's cores, so each computes on one
// thread: QK_NUM_THREADS=1 for pools the ranks start. A pool the test
// process started before forking (earlier tests in the same run) has no
// workers in the ranks, whose calling thread then runs every chunk; it must
// not be resized there (that joins threads the rank does not have).
template <typename F>
qccl_test::Result on_tp_ranks(int n, const std::string& token, F body) {
  const char* before = std::getenv("QK_NUM_THREADS");
  const std::string saved = before ? before : "";
  ::setenv("QK_NUM_THREADS", "1", 1);
  auto r = qk_dist_test::on_ranks(n, token, [n, &body](const qccl_test::Rank& me, qk::dist::ProcessGroup& world) {
    qk::parallel::ParallelSizes sizes;
    sizes.tensor_model_parallel_size = n;
    auto ps = qk::parallel::ParallelState::create(world, sizes);
    body(me.rank, ps->group(qk::parallel::GroupKind::tp));
  });
  if (before)
    ::setenv("QK_NUM_THREADS", saved.c_str(), 1);
  else
    ::unsetenv("QK_NUM_THREADS");
  return r;
}

// max |a - b| / max |b| (b the reference), in f64.
inline double rel_diff(const qk::Tensor& a, const qk::Tensor& b) {
  REQUIRE(a.shape() == b.shape(), "shapes differ: ", qk::shape_str(a.shape()), " vs ", qk::shape_str(b.shape()));
  const qk::Tensor x = qk::ops::contiguous(qk::ops::cast(a.detach(), qk::DType::f64));
  const qk::Tensor y = qk::ops::contiguous(qk::ops::cast(b.detach(), qk::DType::f64));
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    num = std::max(num, std::abs(x.data_ptr<double>()[i] - y.data_ptr<double>()[i]));
    den = std::max(den, std::abs(y.data_ptr<double>()[i]));
  }
  return den > 0 ? num / den : num;
}

inline void require_close(const qk::Tensor& got, const qk::Tensor& want, double tol, const std::string& what) {
  const double d = rel_diff(got, want);
  REQUIRE(d <= tol, what, ": relative difference ", d, " > ", tol);
}

inline void require_equal(const qk::Tensor& got, const qk::Tensor& want, const std::string& what) {
  const double d = rel_diff(got, want);
  REQUIRE(d == 0.0, what, ": differs (relative ", d, ")");
}

}  // namespace qk_tp_test

// A worker for the `qk run` tests: joins the process group from the
// environment and checks every tensor collective against values it can
// compute alone. Prints "rank R of N: all collectives OK" or fails with a message.
//
//   qk run --nproc-per-node 4 -- qk_dist_worker [--elements N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "qk/dist/process_group.h"
#include "qk/tensor/tensor.h"

namespace {

#define EXPECT(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "check failed: %s: ", #cond);           \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, "\n");                                  \
      std::exit(2);                                                \
    }                                                              \
  } while (0)

void run(int64_t n) {
  using qk::dist::ReduceOp;
  qk::dist::init();
  auto& pg = qk::dist::group();
  int r = pg.rank(), w = pg.size();

  // all_reduce, async: x[i] = (r + 1) * i  ->  sum = w(w+1)/2 * i
  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = float((r + 1) * (i % 1000));
  qk::Tensor x = qk::from_vector(xs, {n});
  auto work = pg.all_reduce_async(x);
  work->wait();
  const float* px = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    EXPECT(px[i] == float(w * (w + 1) / 2 * (i % 1000)), "all_reduce x[%lld] = %g", (long long)i, px[i]);

  // max over ranks, int64
  qk::Tensor m = qk::from_vector(std::vector<int64_t>{r, -r}, {2});
  pg.all_reduce(m, ReduceOp::max);
  EXPECT(m.data_ptr<int64_t>()[0] == w - 1 && m.data_ptr<int64_t>()[1] == 0, "max");

  // broadcast from the last rank
  qk::Tensor b = qk::full({3}, r == w - 1 ? 7.5 : -1.0);
  pg.broadcast(b, w - 1);
  EXPECT(b.data_ptr<float>()[2] == 7.5f, "broadcast got %g", b.data_ptr<float>()[2]);

  // all_gather: rank r contributes {r, 10r}
  qk::Tensor mine = qk::from_vector(std::vector<double>{double(r), 10.0 * r}, {2});
  qk::Tensor all = qk::empty({w, 2}, qk::DType::f64);
  pg.all_gather(all, mine);
  for (int k = 0; k < w; ++k)
    EXPECT(all.data_ptr<double>()[2 * k + 1] == 10.0 * k, "all_gather block %d", k);

  // reduce_scatter: block k of every rank's input holds k + r
  std::vector<int32_t> in(2 * w);
  for (int k = 0; k < w; ++k) in[2 * k] = in[2 * k + 1] = k + r;
  qk::Tensor rs_in = qk::from_vector(in, {2 * w});
  qk::Tensor rs_out = qk::empty({2}, qk::DType::i32);
  pg.reduce_scatter(rs_out, rs_in);
  EXPECT(rs_out.data_ptr<int32_t>()[0] == w * r + w * (w - 1) / 2, "reduce_scatter got %d",
         rs_out.data_ptr<int32_t>()[0]);

  pg.barrier();
  std::printf("rank %d of %d: all collectives OK\n", r, w);
  std::fflush(stdout);
  qk::dist::destroy();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 1000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--elements") == 0) n = std::atoll(argv[i + 1]);
  try {
    run(n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qk_dist_worker: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

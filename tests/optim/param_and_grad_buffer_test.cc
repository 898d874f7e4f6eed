// ParamAndGradBuffer (qk/optim/param_and_grad_buffer.h) on two forked ranks:
// Megatron's layout (reverse order, buckets closed at bucket_size, padded to
// lcm(DP, 128), shards cut across parameters), parameters viewing the
// buffer, gradients accumulated by the hooks and averaged over the ranks by
// reduce-scatter or all-reduce, overlap launching buckets during the last
// micro-batch's backward only, the late-gradient error, the all-gather, and
// parameters in a bucket of their own cut alike in two buffers.
#include "qk/optim/param_and_grad_buffer.h"

#include <gtest/gtest.h>

#include "dist/dist_ranks.h"
#include "qccl/ranks.h"
#include "qk/autograd/functions.h"

namespace {

using namespace qk;

// Parameters of 100, 300 and 50 elements; laid out reversed: [p2 p1 | p0].
std::vector<Tensor> make_params() {
  return {full({10, 10}, 1.0).requires_grad_(), full({300}, 2.0).requires_grad_(), full({5, 10}, 3.0).requires_grad_()};
}

// loss = sum_k c_k * sum(p_k): gradient c_k everywhere.
void backward(const std::vector<Tensor>& ps, const std::vector<double>& c) {
  Tensor loss = sum(ps[0]) * c[0] + sum(ps[1]) * c[1] + sum(ps[2]) * c[2];
  loss.backward();
}

TEST(ParamAndGradBuffer, LayoutShardsAndViews) {
  const auto r = qk_dist_test::on_ranks(2, "buffer-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    std::vector<Tensor> ps = make_params();
    optim::ParamAndGradBuffer buf(ps, &pg, {.grad_dtype = DType::f32, .bucket_size = 200});
    const auto& b = buf.buckets();
    REQUIRE(b.size() == 2u, "buckets ", b.size());
    // p2 (50) then p1 (300): 350 >= 200 closes bucket 0, padded to 384; p0 alone in bucket 1, padded to 128.
    REQUIRE(b[0].params == (std::vector<size_t>{2, 1}) && b[0].offset == 0 && b[0].numel == 384, "bucket 0");
    REQUIRE(b[1].params == (std::vector<size_t>{0}) && b[1].offset == 384 && b[1].numel == 128, "bucket 1");
    REQUIRE(buf.param_offset(2) == 0 && buf.param_offset(1) == 50 && buf.param_offset(0) == 384, "offsets");
    REQUIRE(b[0].shard_numel == 192 && b[0].shard_offset == 192 * pg.rank(), "shard of bucket 0");
    const auto& pieces = buf.shard_pieces();
    if (pg.rank() == 0) {
      REQUIRE(pieces.size() == 3u, "rank 0 pieces ", pieces.size());
      REQUIRE(pieces[0].param == 2 && pieces[0].param_offset == 0 && pieces[0].numel == 50, "p2 whole");
      REQUIRE(pieces[1].param == 1 && pieces[1].param_offset == 0 && pieces[1].numel == 142, "p1's first 142");
      REQUIRE(pieces[2].param == 0 && pieces[2].param_offset == 0 && pieces[2].numel == 64, "p0's first 64");
    } else {
      REQUIRE(pieces.size() == 2u, "rank 1 pieces ", pieces.size());
      REQUIRE(pieces[0].param == 1 && pieces[0].param_offset == 142 && pieces[0].numel == 158, "p1's last 158");
      REQUIRE(pieces[1].param == 0 && pieces[1].param_offset == 64 && pieces[1].numel == 36, "p0's last 36");
    }
    // The parameters kept their values and now view the buffer.
    REQUIRE(ps[1].data_ptr<float>()[0] == 2.0f && ps[0].storage() == buf.param_data().storage(), "views");
    buf.param_data().data_ptr<float>()[50] = 7.0f;
    REQUIRE(ps[1].data_ptr<float>()[0] == 7.0f, "p1 sees the buffer");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

void check_reduction(bool shard, bool overlap, DType grad_dtype) {
  const auto r = qk_dist_test::on_ranks(2, "buffer-test", [=](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    std::vector<Tensor> ps = make_params();
    optim::ParamAndGradBuffer buf(
        ps, &pg, {.grad_dtype = grad_dtype, .bucket_size = 200, .shard = shard, .overlap_grad_reduce = overlap});
    const double k = pg.rank() + 1.0;  // rank 0 scales by 1, rank 1 by 2
    buf.zero_grad();
    buf.set_is_last_microbatch(false);
    backward(ps, {1.0 * k, 2.0 * k, 3.0 * k});
    REQUIRE(!ps[0].grad().defined(), "the hook moved .grad into the buffer");
    REQUIRE(buf.main_grad(1).to(DType::f32).to_vector<float>()[7] == static_cast<float>(2.0 * k), "accumulated");
    buf.set_is_last_microbatch(true);
    backward(ps, {1.0 * k, 2.0 * k, 3.0 * k});  // two micro-batches: 2 c_k k
    buf.finish_grad_sync();
    REQUIRE(buf.last_grad_sync().launched_in_backward == (overlap ? 2 : 0), "launched in backward: ",
            buf.last_grad_sync().launched_in_backward);
    // The average over ranks of 2 c_k k is 3 c_k, on the elements this rank owns.
    const Tensor g = buf.grad_data().to(DType::f32);
    const float* d = g.data_ptr<float>();
    for (const auto& b : buf.buckets())
      for (size_t k2 : b.params)
        for (int64_t e = 0; e < ps[k2].numel(); ++e) {
          const int64_t at = buf.param_offset(k2) + e;
          if (at < b.shard_offset || at >= b.shard_offset + b.shard_numel) continue;
          const float want = 3.0f * static_cast<float>(k2 + 1);
          REQUIRE(d[at] == want, "param ", k2, " element ", e, ": ", d[at], " want ", want);
        }
    if (overlap) {
      // One more backward without zero_grad: its gradients reach launched buckets.
      bool threw = false;
      try {
        backward(ps, {1.0, 1.0, 1.0});
      } catch (const Error& e) {
        threw = std::string(e.what()).find("arrived after its bucket's reduction started") != std::string::npos;
      }
      REQUIRE(threw, "a late gradient must be an error");
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ParamAndGradBuffer, ReduceScatterAveragesTheShard) { check_reduction(true, false, DType::f32); }
TEST(ParamAndGradBuffer, OverlappedReduceScatterLaunchesInTheLastBackward) { check_reduction(true, true, DType::f32); }
TEST(ParamAndGradBuffer, AllReduceWithoutSharding) { check_reduction(false, true, DType::f32); }
TEST(ParamAndGradBuffer, Bf16Gradients) { check_reduction(true, true, DType::bf16); }

TEST(ParamAndGradBuffer, AllGatherSpreadsEveryRanksShard) {
  const auto r = qk_dist_test::on_ranks(2, "buffer-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    std::vector<Tensor> ps = make_params();
    optim::ParamAndGradBuffer buf(ps, &pg, {.bucket_size = 200});
    for (const auto& pc : buf.shard_pieces())
      for (int64_t e = 0; e < pc.numel; ++e)
        buf.param_data().data_ptr<float>()[pc.buffer_offset + e] = static_cast<float>(10 * (pg.rank() + 1));
    buf.start_param_sync();
    REQUIRE(buf.param_sync_pending(), "asynchronous");
    buf.finish_param_sync(1);  // p0's bucket
    const auto p0 = ps[0].to_vector<float>();
    REQUIRE(p0[0] == 10.0f && p0[63] == 10.0f && p0[64] == 20.0f && p0[99] == 20.0f, "p0 from both ranks");
    buf.finish_param_sync();
    REQUIRE(!buf.param_sync_pending(), "done");
    const auto p1 = ps[1].to_vector<float>();
    REQUIRE(p1[141] == 10.0f && p1[142] == 20.0f, "p1 cut between the ranks");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Megatron's shared embedding under the distributed optimizer: a parameter
// in own_bucket closes the bucket before and after it, so two buffers with
// other neighbours (the first and last pipeline stage) cut it into the same
// shard pieces.
TEST(ParamAndGradBuffer, OwnBucketIsCutAlikeWhateverItsNeighbours) {
  const auto r = qk_dist_test::on_ranks(2, "buffer-test", [](const qccl_test::Rank&, dist::ProcessGroup& pg) {
    std::vector<Tensor> first = make_params();  // the 300-element p1 between p0 and p2
    std::vector<Tensor> last = {full({30}, 1.0).requires_grad_(), full({300}, 2.0).requires_grad_()};
    optim::ParamAndGradBuffer a(first, &pg, {.bucket_size = 1000, .own_bucket = {1}});
    optim::ParamAndGradBuffer b(last, &pg, {.bucket_size = 1000, .own_bucket = {1}});
    // a: [p2] [p1] [p0]; b: [y] [x]; the 300 elements padded to 384 alone.
    REQUIRE(a.buckets().size() == 3u && a.buckets()[1].params == std::vector<size_t>{1} &&
                a.buckets()[1].numel == 384,
            "a's buckets");
    REQUIRE(b.buckets().size() == 2u && b.buckets()[0].params == std::vector<size_t>{1} &&
                b.buckets()[0].numel == 384,
            "b's buckets");
    auto piece_of = [](const optim::ParamAndGradBuffer& buf, size_t param) {
      for (const auto& pc : buf.shard_pieces())
        if (pc.param == param) return std::pair{pc.param_offset, pc.numel};
      return std::pair<int64_t, int64_t>{-1, 0};
    };
    const auto want = pg.rank() == 0 ? std::pair<int64_t, int64_t>{0, 192} : std::pair<int64_t, int64_t>{192, 108};
    REQUIRE(piece_of(a, 1) == want && piece_of(b, 1) == want, "rank ", pg.rank(), ": pieces [", piece_of(a, 1).first,
            ", +", piece_of(a, 1).second, ") and [", piece_of(b, 1).first, ", +", piece_of(b, 1).second, ")");
    // Without it the neighbours shift the cut.
    std::vector<Tensor> first2 = make_params();
    std::vector<Tensor> last2 = {full({30}, 1.0).requires_grad_(), full({300}, 2.0).requires_grad_()};
    optim::ParamAndGradBuffer c(first2, &pg, {.bucket_size = 1000}), d(last2, &pg, {.bucket_size = 1000});
    REQUIRE(piece_of(c, 1) != piece_of(d, 1), "shared buckets cut alike by chance");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ParamAndGradBuffer, BadInputsAreErrors) {
  EXPECT_THROW(optim::ParamAndGradBuffer({}, nullptr), ValueError);
  Tensor a = zeros({4}).requires_grad_(), b = zeros({4}, DType::bf16).requires_grad_();
  EXPECT_THROW(optim::ParamAndGradBuffer({a, b}, nullptr), ValueError);
  EXPECT_THROW(optim::ParamAndGradBuffer({a, a}, nullptr), ValueError);
  Tensor c = zeros({4}).requires_grad_();
  EXPECT_THROW(optim::ParamAndGradBuffer({c}, nullptr, {.own_bucket = {1}}), ValueError);
}

}  // namespace

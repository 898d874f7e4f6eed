// Sub-groups, all-to-all(v), point to point and the traffic counters of
// process groups, between forked ranks, with exact expected results.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dist/dist_ranks.h"
#include "qk/base/error.h"

namespace {

using qccl_test::Rank;
using qk::Tensor;
using qk::dist::GroupTraffic;
using qk::dist::P2POp;
using qk::dist::ProcessGroup;
using qk_dist_test::on_ranks;

float at(const Tensor& t, int64_t i) { return t.data_ptr<float>()[i]; }

TEST(ProcessGroupSplit, SubGroupsReduceAmongTheirMembersOnly) {
  auto r = on_ranks(4, "split", [](const Rank& me, ProcessGroup& world) {
    // Rows {0,1}, {2,3} and columns {0,2}, {1,3} of a 2 x 2 grid.
    auto row = world.split(me.rank / 2, me.rank, "row");
    auto col = world.split(me.rank % 2, me.rank, "col");
    REQUIRE(row && col, "a member got no group");
    REQUIRE(row->size() == 2 && row->rank() == me.rank % 2, "row rank ", row->rank());
    REQUIRE(col->size() == 2 && col->rank() == me.rank / 2, "col rank ", col->rank());
    const std::vector<int> want_row{me.rank / 2 * 2, me.rank / 2 * 2 + 1};
    const std::vector<int> want_col{me.rank % 2, me.rank % 2 + 2};
    REQUIRE(row->global_ranks() == want_row, "row members");
    REQUIRE(col->global_ranks() == want_col, "col members");

    // Odd ranks issue the column call first, even ranks the row call: the
    // groups have their own queues, so the order across groups is free.
    Tensor a = qk::full({5}, double(1 << me.rank));
    Tensor b = qk::full({7}, double(1 << me.rank));
    qk::dist::WorkPtr wa, wb;
    if (me.rank % 2) {
      wb = col->all_reduce_async(b);
      wa = row->all_reduce_async(a);
    } else {
      wa = row->all_reduce_async(a);
      wb = col->all_reduce_async(b);
    }
    wa->wait();
    wb->wait();
    REQUIRE(at(a, 4) == float((1 << want_row[0]) + (1 << want_row[1])), "row sum ", at(a, 4));
    REQUIRE(at(b, 6) == float((1 << want_col[0]) + (1 << want_col[1])), "col sum ", at(b, 6));

    // A list in any order: members ranked by position; others get nullptr.
    auto odd = world.new_group({3, 1}, "odd");
    if (me.rank % 2 == 0) {
      REQUIRE(odd == nullptr, "rank ", me.rank, " is not in {3, 1}");
    } else {
      REQUIRE(odd && odd->rank() == (me.rank == 3 ? 0 : 1), "odd rank");
      REQUIRE((odd->global_ranks() == std::vector<int>{3, 1}), "odd members");
      Tensor x = qk::full({1}, double(me.rank));
      odd->broadcast(x, 0);
      REQUIRE(at(x, 0) == 3.0f, "broadcast from group rank 0 (global 3): ", at(x, 0));
    }
    // A split of a split names global ranks too.
    auto single = row->split(row->rank(), 0, "single");
    REQUIRE(single->size() == 1 && single->global_ranks() == std::vector<int>{me.rank}, "single");
    single->all_reduce(a);
    world.barrier();

    bool threw = false;
    try {
      world.new_group({0, 0}, "dup");
    } catch (const qk::ValueError&) {
      threw = true;
    }
    REQUIRE(threw, "a repeated rank was accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroupSplit, AllToAllMovesBlockJToRankJ) {
  auto r = on_ranks(3, "a2a", [](const Rank& me, ProcessGroup& pg) {
    const int n = pg.size();
    Tensor in = qk::empty({n * 2}, qk::DType::i64);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 2; ++k) in.data_ptr<int64_t>()[j * 2 + k] = 100 * me.rank + 10 * j + k;
    Tensor out = qk::empty({n * 2}, qk::DType::i64);
    pg.all_to_all(out, in);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 2; ++k)
        REQUIRE(out.data_ptr<int64_t>()[j * 2 + k] == 100 * j + 10 * me.rank + k, "block ", j, " elem ", k, ": ",
                out.data_ptr<int64_t>()[j * 2 + k]);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroupSplit, AllToAllVMovesUnevenRows) {
  auto r = on_ranks(3, "a2av", [](const Rank& me, ProcessGroup& pg) {
    const int n = pg.size();
    // Rank s sends (s + j) % 3 rows to rank j (zero rows included); a row is
    // [2] f32 holding (s, j, row index).
    auto rows = [](int s, int j) { return static_cast<int64_t>((s + j) % 3); };
    std::vector<int64_t> in_splits, out_splits;
    int64_t in_rows = 0, out_rows = 0;
    for (int j = 0; j < n; ++j) {
      in_splits.push_back(rows(me.rank, j));
      out_splits.push_back(rows(j, me.rank));
      in_rows += in_splits.back();
      out_rows += out_splits.back();
    }
    Tensor in = qk::empty({in_rows, 2});
    int64_t i = 0;
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < in_splits[j]; ++k, ++i) {
        in.data_ptr<float>()[2 * i] = float(10 * me.rank + j);
        in.data_ptr<float>()[2 * i + 1] = float(k);
      }
    Tensor out = qk::full({out_rows, 2}, -1.0);
    pg.all_to_all_v(out, in, out_splits, in_splits);
    i = 0;
    for (int s = 0; s < n; ++s)
      for (int64_t k = 0; k < out_splits[s]; ++k, ++i) {
        REQUIRE(at(out, 2 * i) == float(10 * s + me.rank) && at(out, 2 * i + 1) == float(k), "row ", i, " from ", s,
                ": ", at(out, 2 * i), ", ", at(out, 2 * i + 1));
      }
    // Rows that do not add up are refused before anything is sent.
    bool threw = false;
    try {
      std::vector<int64_t> bad = in_splits;
      bad[0] += 1;
      pg.all_to_all_v(out, in, out_splits, bad);
    } catch (const qk::ValueError& e) {
      threw = std::string(e.what()).find("in_splits add up") != std::string::npos;
    }
    REQUIRE(threw, "splits that do not match the input were accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroupSplit, AllToAllVSplitsThatDisagreeAcrossRanksFailFast) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = on_ranks(2, "a2av-bad", [](const Rank& me, ProcessGroup& pg) {
    // Rank 0 sends 2 rows to rank 1, which expects 1.
    std::vector<int64_t> in_splits = me.rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 1};
    std::vector<int64_t> out_splits = me.rank == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1, 1};
    Tensor in = qk::zeros({in_splits[0] + in_splits[1], 3});
    Tensor out = qk::zeros({2, 3});
    try {
      pg.all_to_all_v(out, in, out_splits, in_splits);
    } catch (const qk::Error& e) {
      std::fprintf(stderr, "[rank %d] refused as expected: %s\n", me.rank, e.what());
      std::fflush(nullptr);
      ::_exit(0);  // the communicator is broken now: leave without its teardown
    }
    REQUIRE(me.rank == 0, "rank 1 received a wrongly sized message without an error");
    ::_exit(0);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_LT(qccl_test::seconds_since(t0), 20.0) << "took the deadline instead of failing on the size";
}

TEST(ProcessGroupSplit, PointToPointIsOrderedAndBatchesRunTogether) {
  auto r = on_ranks(3, "p2p", [](const Rank& me, ProcessGroup& pg) {
    const int n = pg.size(), next = (me.rank + 1) % n, prev = (me.rank + n - 1) % n;
    // A ring shift of a large and a small tensor in one batch, plus a send
    // to self: none of it could complete as separate blocking calls.
    Tensor big = qk::full({1 << 18}, double(me.rank));
    Tensor small = qk::full({3}, double(10 + me.rank));
    Tensor self_in = qk::full({4}, double(20 + me.rank));
    Tensor big_in = qk::empty({1 << 18}), small_in = qk::empty({3}), self_out = qk::empty({4});
    pg.batch_isend_irecv({P2POp::send(big, next), P2POp::send(small, next), P2POp::recv(big_in, prev),
                          P2POp::recv(small_in, prev), P2POp::send(self_in, me.rank),
                          P2POp::recv(self_out, me.rank)})
        ->wait();
    REQUIRE(at(big_in, (1 << 18) - 1) == float(prev), "big from ", prev, ": ", at(big_in, (1 << 18) - 1));
    REQUIRE(at(small_in, 2) == float(10 + prev), "small from ", prev);
    REQUIRE(at(self_out, 3) == float(20 + me.rank), "self");

    // Order is the match: rank 0's k-th send to 1 lands in rank 1's k-th receive.
    if (me.rank == 0) {
      auto w1 = pg.send_async(qk::full({2}, 1.0), 1);
      auto w2 = pg.send_async(qk::full({2}, 2.0), 1);
      w1->wait();
      w2->wait();
    } else if (me.rank == 1) {
      Tensor first = qk::empty({2}), second = qk::empty({2});
      pg.recv(first, 0);
      pg.recv(second, 0);
      REQUIRE(at(first, 0) == 1.0f && at(second, 0) == 2.0f, "out of order: ", at(first, 0), ", ", at(second, 0));
    }
    bool threw = false;
    try {
      pg.send(small, n);
    } catch (const qk::ValueError&) {
      threw = true;
    }
    REQUIRE(threw, "a peer outside the group was accepted");
    pg.barrier();
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ProcessGroupSplit, TrafficCountsCallsAndTheRingVolume) {
  ::setenv("QCCL_ALGO", "ring", 1);
  auto r = on_ranks(4, "traffic", [](const Rank& me, ProcessGroup& world) {
    auto pair = world.split(me.rank / 2, me.rank, "pair");
    const int n = world.size();
    const int64_t count = 4096;  // a multiple of n: the ring's blocks are equal
    const uint64_t bytes = count * 4;
    Tensor x = qk::full({count}, 1.0);
    GroupTraffic before = world.traffic(), pair_before = pair->traffic();
    world.all_reduce(x);
    GroupTraffic d = world.traffic() - before;
    REQUIRE(d.all_reduce.calls == 1 && d.all_reduce.bytes == bytes, "all_reduce counter ", d.all_reduce.bytes);
    // The ring all-reduce sends and receives 2(n-1)/n of the buffer per rank.
    REQUIRE(d.wire_bytes_sent == 2 * (n - 1) * bytes / n && d.wire_bytes_received == d.wire_bytes_sent,
            "ring all-reduce moved ", d.wire_bytes_sent, " bytes, expected ", 2 * (n - 1) * bytes / n);

    before = world.traffic();
    Tensor all = qk::empty({count * n});
    world.all_gather(all, x);
    Tensor part = qk::empty({count});
    world.reduce_scatter(part, all);
    Tensor a2a = qk::empty({count});
    world.all_to_all(a2a, x);
    d = world.traffic() - before;
    REQUIRE(d.all_gather.bytes == bytes * n && d.reduce_scatter.bytes == bytes * n && d.all_to_all.bytes == bytes,
            "op counters");
    const uint64_t expect = (n - 1) * bytes       // all-gather: n-1 blocks of count
                            + (n - 1) * bytes     // reduce-scatter: n-1 blocks of count
                            + (n - 1) * bytes / n;  // all-to-all: n-1 blocks of count/n
    REQUIRE(d.wire_bytes_sent == expect, "moved ", d.wire_bytes_sent, ", expected ", expect);

    // The pair group saw none of that, and counts its own.
    GroupTraffic p = pair->traffic() - pair_before;
    REQUIRE(p.wire_bytes_sent == 0 && p.all_reduce.calls == 0, "the pair group counted the world's calls");
    pair->all_reduce(x);
    p = pair->traffic() - pair_before;
    REQUIRE(p.all_reduce.calls == 1 && p.wire_bytes_sent == bytes, "pair all-reduce moved ", p.wire_bytes_sent);
    world.barrier();
  });
  ::unsetenv("QCCL_ALGO");
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

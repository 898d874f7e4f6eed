// The flat ring algorithms run along the communicator's topology-aware ring
// (CommTopo::ring; Note [ring order] in src/qccl/algo/ring_order.h): with a
// topology file or simulated hosts that make the ring a non-identity
// permutation, every ring collective is exact for counts below, at and above
// nranks, each rank exchanges messages only with its ring neighbours (the
// engine's per-peer message counters), random-float sums follow the
// documented ring order bit for bit, and ranks that compute different rings
// use rank 0's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "data.h"
#include "algo/cost_model.h"
#include "algo/ring_order.h"
#include "comm.h"
#include "topo/comm_topo.h"
#include "ranks.h"

namespace qccl_test {
namespace {

// Four GPUs whose MT-Links form the ring GPU0 GPU2 GPU1 GPU3 (PCIe otherwise).
const std::string kCrossed = std::string(QK_SOURCE_DIR) + "/tests/qccl/topo/crossed_pairs_4.json";

Options two_ids() {
  Options o;
  o.num_ids = 2;
  return o;
}

struct Counts {
  std::vector<uint64_t> sent, received;
};
Counts counts(qcclComm_t c) { return {c->msgs_sent, c->msgs_received}; }

// The ring the communicator computed (CommTopo::ring), read here rather than
// through qccl::ring_order() so that the checks do not trust the code under test.
qccl::RingOrder topo_ring(qcclComm_t c) {
  const std::vector<int>& ring = c->topo->ring;
  REQUIRE(static_cast<int>(ring.size()) == c->nranks, "ring of ", ring.size(), " ranks");
  int pos = static_cast<int>(std::find(ring.begin(), ring.end(), c->rank) - ring.begin());
  REQUIRE(pos < c->nranks, "rank ", c->rank, " not on the ring ", c->topo->format_ring());
  return {ring.data(), c->nranks, pos};
}

// Since `before`: `per_step` messages went to the ring's next rank and came
// from its previous one (a rank may be both, on 2 ranks), none to or from
// anyone else.
void require_ring_traffic(qcclComm_t c, const Counts& before, uint64_t to_next, uint64_t from_prev,
                          const std::string& what) {
  qccl::RingOrder ro = topo_ring(c);
  for (int p = 0; p < c->nranks; ++p) {
    uint64_t sent = c->msgs_sent[p] - before.sent[p], got = c->msgs_received[p] - before.received[p];
    REQUIRE(sent == (p == ro.next() ? to_next : 0), what, ": rank ", c->rank, " sent ", sent,
            " messages to rank ", p, "; its ring neighbours are ", ro.prev(), " -> ", c->rank, " -> ",
            ro.next());
    REQUIRE(got == (p == ro.prev() ? from_prev : 0), what, ": rank ", c->rank, " received ", got,
            " messages from rank ", p, "; its ring neighbours are ", ro.prev(), " -> ", c->rank,
            " -> ", ro.next());
  }
}

// Every ring collective, exact, with only ring-neighbour traffic. `ring` and
// `chain` are communicators whose algo is forced to "ring" and "chain".
void check_ring_collectives(qcclComm_t ring, qcclComm_t chain, const Rank& me) {
  const int n = me.nranks;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  for (auto t : {qcclFloat32, qcclInt32, qcclBfloat16, qcclInt8})
    for (auto op : {qcclSum, qcclProd, qcclMax, qcclAvg})
      for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(5), size_t(7),
                           size_t(1000), size_t(65537)})
        for (bool in_place : {false, true}) {
          std::string what = cat(qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count,
                                 in_place ? " in place" : "");
          size_t es = qccl::dtype_size(t);
          // All-reduce.
          auto in = make_input(me.rank, count, op, t);
          auto want = reference(n, count, op, t);
          std::vector<char> out(in.size(), 0x5a);
          void* dst = in_place ? in.data() : out.data();
          Counts c0 = counts(ring);
          REQUIRE_OK(qcclAllReduce(in.data(), dst, count, t, op, ring, nullptr));
          std::string d = diff(dst, want.data(), count, t);
          REQUIRE(d.empty(), "allreduce ", what, ": ", d);
          require_ring_traffic(ring, c0, 2 * steps, 2 * steps, "allreduce " + what);

          // All-gather: block r of the output is rank r's input.
          std::vector<char> gathered(count * es * n + 1, 0x77), gwant(gathered.size(), 0);
          for (int r = 0; r < n; ++r) {
            auto blk = make_input(r, count, op, t, 3);
            std::memcpy(gwant.data() + r * count * es, blk.data(), count * es);
          }
          auto mine = make_input(me.rank, count, op, t, 3);
          const void* gsrc = mine.data();
          if (in_place) {
            std::memcpy(gathered.data() + me.rank * count * es, mine.data(), count * es);
            gsrc = gathered.data() + me.rank * count * es;
          }
          c0 = counts(ring);
          REQUIRE_OK(qcclAllGather(gsrc, gathered.data(), count, t, ring, nullptr));
          d = diff(gathered.data(), gwant.data(), count * n, t);
          REQUIRE(d.empty(), "allgather ", what, ": ", d);
          require_ring_traffic(ring, c0, steps, steps, "allgather " + what);

          // Reduce-scatter: rank r gets block r of the reduction.
          auto rin = make_input(me.rank, count * n, op, t, 7);
          auto full = reference(n, count * n, op, t, 7);
          std::vector<char> part(count * es + 1, 0x66);
          void* rdst = in_place ? rin.data() + me.rank * count * es : part.data();
          c0 = counts(ring);
          REQUIRE_OK(qcclReduceScatter(rin.data(), rdst, count, t, op, ring, nullptr));
          d = diff(rdst, full.data() + me.rank * count * es, count, t);
          REQUIRE(d.empty(), "reducescatter ", what, ": ", d);
          require_ring_traffic(ring, c0, steps, steps, "reducescatter " + what);
        }
  // The chains of broadcast and reduce run along the ring from the root: the
  // rank before the root on the ring ends the chain.
  for (size_t count : {size_t(1), size_t(1000), size_t(300001)})
    for (int root = 0; root < n; ++root) {
      qccl::RingOrder ro = topo_ring(chain);
      bool last = ro.next() == root;  // the chain's end: sends nothing on
      uint64_t chunks = std::max<uint64_t>(1, (count * 4 + chain->tuning.chain_chunk - 1) / chain->tuning.chain_chunk);
      auto data = make_input(root, count, qcclSum, qcclFloat32, 5);
      std::vector<char> buf = me.rank == root ? data : std::vector<char>(data.size(), 0x33);
      Counts c0 = counts(chain);
      REQUIRE_OK(qcclBroadcast(buf.data(), buf.data(), count, qcclFloat32, root, chain, nullptr));
      std::string d = diff(buf.data(), data.data(), count, qcclFloat32);
      REQUIRE(d.empty(), "broadcast root ", root, " count ", count, ": ", d);
      require_ring_traffic(chain, c0, last ? 0 : chunks, me.rank == root ? 0 : chunks,
                           cat("broadcast root ", root, " count ", count));

      auto in = make_input(me.rank, count, qcclMin, qcclInt32);
      std::vector<char> out(in.size(), 0x11);
      c0 = counts(chain);
      REQUIRE_OK(qcclReduce(in.data(), out.data(), count, qcclInt32, qcclMin, root, chain, nullptr));
      if (me.rank == root) {
        auto want = reference(n, count, qcclMin, qcclInt32);
        d = diff(out.data(), want.data(), count, qcclInt32);
        REQUIRE(d.empty(), "reduce root ", root, " count ", count, ": ", d);
      }
      // Reduce flows the other way: from the chain's end back to the root.
      uint64_t rchunks = std::max<uint64_t>(1, (count * 4 + chain->tuning.chain_chunk - 1) / chain->tuning.chain_chunk);
      Counts after = counts(chain);
      for (int p = 0; p < n; ++p) {
        uint64_t sent = after.sent[p] - c0.sent[p], got = after.received[p] - c0.received[p];
        REQUIRE(sent == (p == ro.prev() && me.rank != root ? rchunks : 0), "reduce root ", root,
                ": rank ", me.rank, " sent ", sent, " messages to rank ", p);
        REQUIRE(got == (p == ro.next() && !last ? rchunks : 0), "reduce root ", root, ": rank ",
                me.rank, " received ", got, " messages from rank ", p);
      }
    }
}

// Two communicators (ring and chain forced, ids 0 and 1) on the ring `want`;
// every ring collective on them (check_ring_collectives).
void check_ring_and_chain(const Rank& me, const std::vector<int>& want) {
  qcclComm_t ring = me.init(0, "ring");
  qcclComm_t chain = me.init(1, "chain");
  REQUIRE(ring->topo->ring == want, "ring ", ring->topo->format_ring());
  REQUIRE(chain->topo->ring == want, "chain ring ", chain->topo->format_ring());
  check_ring_collectives(ring, chain, me);
  REQUIRE_OK(qcclCommDestroy(ring));
  REQUIRE_OK(qcclCommDestroy(chain));
}

TEST(FlatRing, FollowsTheTopologyFileRing) {
  auto r = run_ranks(4, [](const Rank& me) {
    ::setenv("QCCL_TOPO_FILE", kCrossed.c_str(), 1);
    ::unsetenv("QCCL_HOST_ID");
    // The fixture's ring (qk topo --ring --file crossed_pairs_4.json).
    check_ring_and_chain(me, {0, 2, 1, 3});
  }, two_ids());
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Three ranks on two simulated hosts, rank 1 alone on its host: the ring goes
// host by host (0 2 1), shared memory inside host a, TCP across.
TEST(FlatRing, FollowsHostsOnThreeRanks) {
  auto r = run_ranks(3, [](const Rank& me) {
    ::unsetenv("QCCL_TOPO_FILE");
    ::setenv("QCCL_HOST_ID", me.rank == 1 ? "b" : "a", 1);
    check_ring_and_chain(me, {0, 2, 1});
  }, two_ids());
  EXPECT_TRUE(r.ok()) << r.summary();
}

// Without a topology the ring is rank order, as before.
TEST(FlatRing, RankOrderWithoutATopology) {
  auto r = run_ranks(3, [](const Rank& me) {
    ::unsetenv("QCCL_TOPO_FILE");
    ::unsetenv("QCCL_HOST_ID");
    qcclComm_t comm = me.init(0, "ring");
    REQUIRE(comm->topo->ring == (std::vector<int>{0, 1, 2}), "ring ", comm->topo->format_ring());
    qccl::RingOrder ro = qccl::ring_order(*comm);
    REQUIRE(ro.pos == me.rank && ro.next() == (me.rank + 1) % 3, "position ", ro.pos, " next ", ro.next());
    auto in = make_input(me.rank, 1000, qcclSum, qcclFloat32);
    auto want = reference(3, 1000, qcclSum, qcclFloat32);
    std::vector<char> out(in.size());
    Counts c0 = counts(comm);
    REQUIRE_OK(qcclAllReduce(in.data(), out.data(), 1000, qcclFloat32, qcclSum, comm, nullptr));
    REQUIRE(diff(out.data(), want.data(), 1000, qcclFloat32).empty(), "wrong result");
    require_ring_traffic(comm, c0, 4, 4, "allreduce");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// On random floats the order shows: the results equal the serial fold of Note
// [ring order] along the topology ring, bit for bit on every rank, and not the
// rank-order fold.
TEST(FlatRing, RandomFloatsFollowTheRingOrder) {
  auto r = run_ranks(4, [](const Rank& me) {
    ::setenv("QCCL_TOPO_FILE", kCrossed.c_str(), 1);
    ::unsetenv("QCCL_HOST_ID");
    qcclComm_t comm = me.init(0, "ring");
    const std::vector<int>& ring = comm->topo->ring;
    REQUIRE(ring == (std::vector<int>{0, 2, 1, 3}), "ring ", comm->topo->format_ring());
    const int n = me.nranks;
    std::vector<int> identity{0, 1, 2, 3};
    bool order_showed = false;
    for (auto t : {qcclFloat32, qcclBfloat16, qcclFloat16, qcclFloat64})
      for (auto op : {qcclSum, qcclAvg, qcclProd})
        for (size_t count : {size_t(3), size_t(1001), size_t(40000)}) {
          size_t es = qccl::dtype_size(t);
          std::vector<std::vector<char>> inputs(n, std::vector<char>(count * n * es));
          for (int q = 0; q < n; ++q) {
            std::mt19937 gen(99 + q);
            std::uniform_real_distribution<double> dist(op == qcclProd ? 0.5 : -1.0, op == qcclProd ? 1.5 : 1.0);
            for (size_t i = 0; i < count * n; ++i) set(inputs[q].data(), t, i, dist(gen) * (1.0 + i % 7));
          }
          std::string what = cat(qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count);
          // All-reduce over the first `count` elements.
          std::vector<char> out(count * es);
          REQUIRE_OK(qcclAllReduce(inputs[me.rank].data(), out.data(), count, t, op, comm, nullptr));
          std::vector<std::vector<char>> first(n);
          for (int q = 0; q < n; ++q) first[q].assign(inputs[q].begin(), inputs[q].begin() + count * es);
          auto want = qccl::ring_reference(first, count, t, op, ring);
          std::string d = diff(out.data(), want.data(), count, t);
          REQUIRE(d.empty(), "allreduce ", what, ": ", d);
          auto rank_order = qccl::ring_reference(first, count, t, op, identity);
          order_showed |= !diff(out.data(), rank_order.data(), count, t).empty();
          // Reduce-scatter of count elements per rank: the block of the rank at
          // position P is folded from position P+1 around the ring.
          std::vector<char> part(count * es);
          REQUIRE_OK(qcclReduceScatter(inputs[me.rank].data(), part.data(), count, t, op, comm, nullptr));
          qccl::RingOrder ro = topo_ring(comm);
          std::vector<char> acc(count * es);
          size_t off = me.rank * count * es;
          std::memcpy(acc.data(), inputs[ro.rank_at(ro.pos + 1)].data() + off, count * es);
          for (int k = 2; k <= n; ++k)
            qccl::reduce(acc.data(), acc.data(), inputs[ro.rank_at(ro.pos + k)].data() + off, count, t, op);
          if (op == qcclAvg) qccl::finish_avg(acc.data(), count, t, n);
          d = diff(part.data(), acc.data(), count, t);
          REQUIRE(d.empty(), "reducescatter ", what, ": ", d);
        }
    REQUIRE(order_showed, "the ring order and rank order gave the same bits on every random input");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// A topology file on one rank only: the ranks would compute different rings,
// so all take rank 0's (the file's when rank 0 has it, else rank order).
TEST(FlatRing, RanksThatDisagreeUseRankZerosRing) {
  for (int with_file : {0, 2}) {
    auto r = run_ranks(4, [with_file](const Rank& me) {
      ::unsetenv("QCCL_HOST_ID");
      if (me.rank == with_file) ::setenv("QCCL_TOPO_FILE", kCrossed.c_str(), 1);
      else ::unsetenv("QCCL_TOPO_FILE");
      qcclComm_t comm = me.init(0, "ring");
      std::vector<int> want_ring = with_file == 0 ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3};
      REQUIRE(comm->topo->ring == want_ring, "file on rank ", with_file, ": ring ", comm->topo->format_ring());
      auto in = make_input(me.rank, 1001, qcclSum, qcclInt64);
      auto want = reference(me.nranks, 1001, qcclSum, qcclInt64);
      std::vector<char> out(in.size());
      Counts c0 = counts(comm);
      REQUIRE_OK(qcclAllReduce(in.data(), out.data(), 1001, qcclInt64, qcclSum, comm, nullptr));
      REQUIRE(diff(out.data(), want.data(), 1001, qcclInt64).empty(), "wrong result");
      require_ring_traffic(comm, c0, 6, 6, "allreduce");
      REQUIRE_OK(qcclCommDestroy(comm));
    });
    EXPECT_TRUE(r.ok()) << "file on rank " << with_file << ": " << r.summary();
  }
}

}  // namespace
}  // namespace qccl_test

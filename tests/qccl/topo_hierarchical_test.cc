// Hierarchical all-reduce across simulated hosts (QCCL_HOST_ID gives each
// rank's host; ranks on different hosts talk TCP, as on two machines): it
// equals the flat ring and the serial reference bit for bit on exact data,
// equals the serial reference of its own documented order on random floats,
// and falls back to the flat algorithms on one host or uneven hosts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "data.h"
#include "algo/cost_model.h"
#include "algo/hierarchical.h"
#include "comm.h"
#include "topo/comm_topo.h"
#include "ranks.h"

namespace qccl_test {
namespace {

// Rank r of n on host r / per_host.
void be_on_host(const Rank& me, int per_host) {
  ::setenv("QCCL_HOST_ID", cat("host", me.rank / per_host).c_str(), 1);
}

Options two_ids() {
  Options o;
  o.num_ids = 2;
  return o;
}

std::string run_allreduce(qcclComm_t comm, const void* in, void* out, size_t count, qcclDataType_t t,
                          qcclRedOp_t op) {
  if (qcclAllReduce(in, out, count, t, op, comm, nullptr) != qcclSuccess)
    return cat("qcclAllReduce failed: ", qcclGetLastError(comm));
  return "";
}

TEST(TopoHierarchical, EqualsFlatAndReferenceOnTwoHosts) {
  for (int per_host : {1, 2, 3}) {
    auto r = run_ranks(2 * per_host, [per_host](const Rank& me) {
      be_on_host(me, per_host);
      qcclComm_t hier = me.init(0, "hierarchical");
      qcclComm_t flat = me.init(1, "ring");
      REQUIRE(qccl::hierarchical_usable(*hier), "plan: ", hier->topo->plan.why_not);
      REQUIRE(hier->cost.hosts == 2, "cost model sees ", hier->cost.hosts, " hosts");
      for (auto t : kAllTypes)
        for (auto op : kAllOps)
          for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(65537)})
            for (bool in_place : {false, true}) {
              auto in = make_input(me.rank, count, op, t);
              auto in2 = in;
              auto want = reference(me.nranks, count, op, t);
              std::vector<char> out(in.size(), 0x5a), out2(in.size(), 0x3c);
              void* h_out = in_place ? in.data() : out.data();
              void* f_out = in_place ? in2.data() : out2.data();
              REQUIRE(run_allreduce(hier, in.data(), h_out, count, t, op).empty(), qcclGetLastError(hier));
              REQUIRE(run_allreduce(flat, in2.data(), f_out, count, t, op).empty(), qcclGetLastError(flat));
              std::string d = diff(h_out, want.data(), count, t);
              REQUIRE(d.empty(), "hierarchical ", qccl::dtype_name(t), " ", qccl::op_name(op), " count ",
                      count, in_place ? " in place: " : ": ", d);
              d = diff(h_out, f_out, count, t);
              REQUIRE(d.empty(), "hierarchical vs flat ring ", qccl::dtype_name(t), " ", qccl::op_name(op),
                      " count ", count, ": ", d);
            }
      REQUIRE_OK(qcclCommDestroy(hier));
      REQUIRE_OK(qcclCommDestroy(flat));
    }, two_ids());
    EXPECT_TRUE(r.ok()) << "2 hosts x " << per_host << ": " << r.summary();
  }
}

// Random floats: the order matters, and the result is the documented one.
TEST(TopoHierarchical, RandomFloatsFollowTheDocumentedOrder) {
  auto r = run_ranks(6, [](const Rank& me) {
    ::setenv("QCCL_HOST_ID", cat("host", me.rank % 2).c_str(), 1);  // hosts interleave ranks
    qcclComm_t comm = me.init(0, "hierarchical");
    qcclComm_t flat = me.init(1, "ring");
    REQUIRE(qccl::hierarchical_usable(*comm), comm->topo->plan.why_not);
    const auto& rings = comm->topo->plan.local_rings;
    REQUIRE(rings.size() == 2 && rings[0] == (std::vector<int>{0, 2, 4}), "host 0 ring");
    for (auto t : {qcclFloat32, qcclBfloat16, qcclFloat16, qcclFloat64})
      for (auto op : {qcclSum, qcclAvg, qcclProd})
        for (size_t count : {size_t(5), size_t(1001), size_t(40000)}) {
          size_t es = qccl::dtype_size(t);
          std::vector<std::vector<char>> inputs(me.nranks, std::vector<char>(count * es));
          for (int q = 0; q < me.nranks; ++q) {
            std::mt19937 gen(1234 + q);
            std::uniform_real_distribution<double> dist(op == qcclProd ? 0.5 : -1.0, op == qcclProd ? 1.5 : 1.0);
            for (size_t i = 0; i < count; ++i) set(inputs[q].data(), t, i, dist(gen) * (1.0 + i % 7));
          }
          std::vector<char> out(count * es);
          REQUIRE(run_allreduce(comm, inputs[me.rank].data(), out.data(), count, t, op).empty(),
                  qcclGetLastError(comm));
          auto want = qccl::hierarchical_reference(inputs, count, t, op, rings);
          std::string d = diff(out.data(), want.data(), count, t);
          REQUIRE(d.empty(), qccl::dtype_name(t), " ", qccl::op_name(op), " count ", count, ": ", d);
          if (t == qcclFloat32 && op == qcclSum && count == 40000) {
            // The flat ring's order gives other bits here, so this test can
            // tell which algorithm ran.
            std::vector<char> flat_out(count * es);
            REQUIRE(run_allreduce(flat, inputs[me.rank].data(), flat_out.data(), count, t, op).empty(),
                    qcclGetLastError(flat));
            REQUIRE(!diff(flat_out.data(), want.data(), count, t).empty(),
                    "flat ring and hierarchical orders gave the same bits on random data");
          }
        }
    REQUIRE_OK(qcclCommDestroy(comm));
    REQUIRE_OK(qcclCommDestroy(flat));
  }, two_ids());
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TopoHierarchical, OneHostFallsBackToFlat) {
  auto r = run_ranks(3, [](const Rank& me) {
    ::unsetenv("QCCL_HOST_ID");
    qcclComm_t comm = me.init(0, "hierarchical");
    REQUIRE(!qccl::hierarchical_usable(*comm), "one host must not use the hierarchical plan");
    REQUIRE(comm->cost.hosts == 1, "cost model sees ", comm->cost.hosts, " hosts");
    for (auto t : {qcclFloat32, qcclInt32})
      for (size_t count : {size_t(1), size_t(1000)}) {
        auto in = make_input(me.rank, count, qcclSum, t);
        auto want = reference(me.nranks, count, qcclSum, t);
        std::vector<char> out(in.size());
        REQUIRE(run_allreduce(comm, in.data(), out.data(), count, t, qcclSum).empty(), qcclGetLastError(comm));
        std::string d = diff(out.data(), want.data(), count, t);
        REQUIRE(d.empty(), d);
      }
    // The flight recorder names the algorithm that ran.
    std::string fr = comm->fr.dump();
    REQUIRE(fr.find("hierarchical") == std::string::npos, "flat expected, recorder shows: ", fr);
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TopoHierarchical, UnevenHostsFallBackToFlat) {
  auto r = run_ranks(3, [](const Rank& me) {
    ::setenv("QCCL_HOST_ID", me.rank < 2 ? "a" : "b", 1);
    qcclComm_t comm = me.init(0, "hierarchical");
    REQUIRE(!qccl::hierarchical_usable(*comm), "2 + 1 ranks must not use the hierarchical plan");
    auto in = make_input(me.rank, 999, qcclMax, qcclInt16);
    auto want = reference(me.nranks, 999, qcclMax, qcclInt16);
    std::vector<char> out(in.size());
    REQUIRE(run_allreduce(comm, in.data(), out.data(), 999, qcclInt16, qcclMax).empty(), qcclGetLastError(comm));
    REQUIRE(diff(out.data(), want.data(), 999, qcclInt16).empty(), "wrong result");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TopoHierarchical, CostModelChoosesItAcrossHostsForLargeMessages) {
  auto r = run_ranks(4, [](const Rank& me) {
    be_on_host(me, 2);
    ::setenv("QCCL_COST_MODEL", "static", 1);  // fixed figures: shm 6 GB/s, tcp 2 GB/s
    qcclComm_t comm = me.init(0, "auto");
    qccl::Algo a = qccl::choose(comm->cost, comm->algo, qccl::Coll::kAllReduce, 4, 64 << 20);
    REQUIRE(a == qccl::Algo::kHierarchical, "auto chose ", qccl::algo_name(a), " for 64 MiB on 2 hosts");
    size_t count = 300000;
    auto in = make_input(me.rank, count, qcclSum, qcclFloat32);
    auto want = reference(me.nranks, count, qcclSum, qcclFloat32);
    std::vector<char> out(in.size());
    REQUIRE(run_allreduce(comm, in.data(), out.data(), count, qcclFloat32, qcclSum).empty(), qcclGetLastError(comm));
    REQUIRE(diff(out.data(), want.data(), count, qcclFloat32).empty(), "wrong result");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qccl_test

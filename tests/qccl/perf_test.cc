// The perf harness (qk/qccl/perf.h) as a library: the sweep of sizes, counts
// and bus factors, alltoallv's shares, the table's lines; every collective
// checked and timed on 1-4 forked ranks with no element wrong; the check
// counting a wrong element on any rank; memcpy's sweep. `qk perf` end to end
// is perf_cli_test.cc.
#include "qk/qccl/perf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "perf/perf_rank.h"
#include "qk/base/error.h"
#include "qk/qccl/check_data.h"
#include "ranks.h"

namespace qccl_test {
namespace {

using qk::qccl::PerfBenchmark;
using qk::qccl::PerfCollective;
using qk::qccl::PerfOptions;
using qk::qccl::PerfResult;
using qk::qccl::PerfRow;
using qk::qccl::PerfSummary;

TEST(PerfSizes, MultiplyByTheFactorUpToTheLargest) {
  EXPECT_EQ(qk::qccl::perf_sizes(8, 64, 2), (std::vector<size_t>{8, 16, 32, 64}));
  EXPECT_EQ(qk::qccl::perf_sizes(8, 32 << 10, 8), (std::vector<size_t>{8, 64, 512, 4096, 32768}));
  EXPECT_EQ(qk::qccl::perf_sizes(100, 6400, 8), (std::vector<size_t>{100, 800, 6400}));
  EXPECT_EQ(qk::qccl::perf_sizes(100, 799, 8), (std::vector<size_t>{100}));
  EXPECT_EQ(qk::qccl::perf_sizes(1024, 1024, 2), (std::vector<size_t>{1024}));
}

TEST(PerfSizes, StepAtLeastOneByteAndZeroIsFollowedByOne) {
  EXPECT_EQ(qk::qccl::perf_sizes(1, 7, 1.5), (std::vector<size_t>{1, 2, 3, 4, 6}));  // 1 x 1.5 < 1 + 1: 2; then 3, 4.5, 6.75
  const std::vector<size_t> from0 = qk::qccl::perf_sizes(0, 64, 2);
  ASSERT_GE(from0.size(), 3u);
  EXPECT_EQ(from0[0], 0u);
  EXPECT_EQ(from0[1], 1u);
  EXPECT_TRUE(std::is_sorted(from0.begin(), from0.end()));
  EXPECT_LE(from0.back(), 64u);
}

TEST(PerfSizes, RefusesAnEmptyRangeAndAFactorOfOne) {
  EXPECT_THROW(qk::qccl::perf_sizes(64, 8, 2), qk::ValueError);
  EXPECT_THROW(qk::qccl::perf_sizes(8, 64, 1.0), qk::ValueError);
  EXPECT_THROW(qk::qccl::perf_sizes(8, 64, 0.5), qk::ValueError);
}

TEST(PerfCollectives, NamedAsQkPerfSpellsThem) {
  const auto& all = qk::qccl::perf_collectives();
  ASSERT_EQ(all.size(), 7u);
  for (const auto& c : all) {
    EXPECT_EQ(qk::qccl::find_perf_collective(c.name), &c) << c.name;
    EXPECT_EQ(&qk::qccl::perf_collective_info(c.collective), &c) << c.name;
    EXPECT_EQ(c.has_in_place, c.collective != PerfCollective::alltoallv) << c.name;
  }
  EXPECT_EQ(qk::qccl::find_perf_collective("scatter"), nullptr);
  EXPECT_TRUE(qk::qccl::perf_collective_info(PerfCollective::reduce).has_op);
  EXPECT_TRUE(qk::qccl::perf_collective_info(PerfCollective::reduce).has_root);
  EXPECT_FALSE(qk::qccl::perf_collective_info(PerfCollective::all_gather).has_op);
}

// nccl-tests: the size is the largest buffer; busbw = algbw x the bus factor.
TEST(PerfCounts, AsNcclTestsCountThem) {
  using qk::qccl::perf_bus_factor;
  using qk::qccl::perf_bytes;
  using qk::qccl::perf_count;
  EXPECT_EQ(perf_count(PerfCollective::all_reduce, 32768, 4, 4), 8192u);
  EXPECT_EQ(perf_bytes(PerfCollective::all_reduce, 8192, 4, 4), 32768u);
  for (PerfCollective c : {PerfCollective::all_gather, PerfCollective::reduce_scatter, PerfCollective::alltoall}) {
    EXPECT_EQ(perf_count(c, 32768, 4, 4), 2048u);
    EXPECT_EQ(perf_bytes(c, 2048, 4, 4), 32768u);
  }
  EXPECT_EQ(perf_count(PerfCollective::alltoallv, 100, 4, 3), 25u);  // uneven blocks: the whole size per rank
  EXPECT_EQ(perf_bytes(PerfCollective::alltoallv, 25, 4, 3), 100u);
  EXPECT_EQ(perf_count(PerfCollective::broadcast, 7, 2, 2), 3u);  // whole elements only

  EXPECT_DOUBLE_EQ(perf_bus_factor(PerfCollective::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(perf_bus_factor(PerfCollective::all_reduce, 1), 0.0);
  for (PerfCollective c : {PerfCollective::all_gather, PerfCollective::reduce_scatter, PerfCollective::alltoall,
                           PerfCollective::alltoallv})
    EXPECT_DOUBLE_EQ(perf_bus_factor(c, 4), 0.75);
  EXPECT_DOUBLE_EQ(perf_bus_factor(PerfCollective::broadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(perf_bus_factor(PerfCollective::reduce, 4), 1.0);
}

TEST(AllToAllvShares, SkewedAroundTheMeanAndAddUpToTheCount) {
  EXPECT_EQ(qk::qccl::alltoallv_shares(25, 1), (std::vector<size_t>{25}));
  // 25 elements over 3 ranks: floor(25 * 1/9), floor(25 * 3/9), the rest.
  EXPECT_EQ(qk::qccl::alltoallv_shares(25, 3), (std::vector<size_t>{2, 8, 15}));
  for (int n = 1; n <= 8; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(25), size_t(1) << 20}) {
      const std::vector<size_t> s = qk::qccl::alltoallv_shares(count, n);
      ASSERT_EQ(s.size(), static_cast<size_t>(n));
      EXPECT_EQ(std::accumulate(s.begin(), s.end(), size_t(0)), count) << n << " ranks, " << count;
      for (int k = 0; k + 1 < n; ++k) EXPECT_EQ(s[k], count * (2 * k + 1) / (size_t(n) * n)) << k;
    }
  // No overflow where count * (2n - 1) would not fit.
  const size_t big = std::numeric_limits<size_t>::max() / 2;
  const std::vector<size_t> s = qk::qccl::alltoallv_shares(big, 4);
  EXPECT_EQ(std::accumulate(s.begin(), s.end(), size_t(0)), big);
  EXPECT_NEAR(static_cast<double>(s[0]), static_cast<double>(big) / 16, static_cast<double>(big) * 1e-12);
  EXPECT_THROW(qk::qccl::alltoallv_shares(1, 0), qk::ValueError);
}

TEST(PerfTable, LinesInNcclTestsLayout) {
  const std::string header = qk::qccl::perf_table_header();
  EXPECT_EQ(std::count(header.begin(), header.end(), '\n'), 3);
  EXPECT_EQ(header.find("#       size        count     type  redop  root       time   algbw   busbw #wrong"),
            header.find('\n') + 1)
      << header;

  PerfOptions o;  // all_reduce, float, sum
  PerfRow row;
  row.bytes = 32768;
  row.count = 8192;
  row.out_of_place = PerfResult{true, 11.68, 2.81, 2.81, 0};
  row.in_place = PerfResult{true, 13.544, 2.42, 2.42, 3};
  EXPECT_EQ(qk::qccl::perf_table_row(row, o),
            "       32768         8192    float    sum    -1      11.68    2.81    2.81      0      13.54    2.42"
            "    2.42      3\n");
  // alltoallv: no op, no root, no in-place form; unchecked: N/A.
  o.collective = PerfCollective::alltoallv;
  o.type_name = "half";
  row.out_of_place.wrong = -1;
  row.in_place = PerfResult{};
  EXPECT_TRUE(std::regex_match(qk::qccl::perf_table_row(row, o),
                               std::regex(" +32768 +8192 +half +none +-1 +11.68 +2.81 +2.81 +N/A +N/A +N/A +N/A +N/A\n")))
      << qk::qccl::perf_table_row(row, o);
  o.collective = PerfCollective::broadcast;
  o.root = 1;
  EXPECT_NE(qk::qccl::perf_table_row(row, o).find(" none     1 "), std::string::npos) << qk::qccl::perf_table_row(row, o);

  EXPECT_EQ(qk::qccl::perf_table_summary(PerfSummary{0, 3.3, 16}),
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 3.300\n#\n");
  EXPECT_EQ(qk::qccl::perf_table_summary(PerfSummary{5, 0, 0}),
            "# Out of bounds values : 5 FAILED\n# Avg bus bandwidth    : 0.000\n#\n");
}

// Every collective on 1-4 ranks, float sum and a few other types and
// operations: every size checked exact on every rank, timed, and busbw
// derived from algbw as nccl-tests does.
TEST(PerfBenchmark, EveryCollectiveIsExactOnOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    auto r = run_ranks(n, [](const Rank& me) {
      qcclComm_t comm = me.init();
      struct Case {
        qcclDataType_t type;
        qcclRedOp_t op;
      };
      for (Case c : {Case{qcclFloat32, qcclSum}, Case{qcclFloat16, qcclMax}, Case{qcclInt8, qcclProd},
                     Case{qcclBfloat16, qcclAvg}})
        for (const auto& info : qk::qccl::perf_collectives()) {
          PerfOptions o;
          o.collective = info.collective;
          o.type = c.type;
          o.op = c.op;
          o.root = me.nranks - 1;
          o.min_bytes = 8;
          o.max_bytes = 4096;
          o.factor = 8;
          o.iters = 2;
          o.warmup = 1;
          PerfBenchmark bench(comm, o);
          std::vector<PerfRow> rows;
          const PerfSummary s = bench.run([&](const PerfRow& row) { rows.push_back(row); });
          REQUIRE(s.wrong == 0, info.name, " type ", c.type, " op ", c.op, ": ", s.wrong, " wrong");
          REQUIRE(rows.size() == 4, info.name, ": ", rows.size(), " rows");  // 8, 64, 512, 4096
          const size_t es = qk::qccl::check::element_size(c.type);
          for (size_t i = 0; i < rows.size(); ++i) {
            const PerfRow& row = rows[i];
            REQUIRE(row.count == qk::qccl::perf_count(info.collective, size_t(8) << (3 * i), es, me.nranks),
                    info.name, " row ", i, " count ", row.count);
            REQUIRE(row.bytes == qk::qccl::perf_bytes(info.collective, row.count, es, me.nranks), info.name);
            for (const PerfResult* res : {&row.out_of_place, &row.in_place}) {
              const bool in_place = res == &row.in_place;
              REQUIRE(res->measured == (!in_place || info.has_in_place), info.name, " in place ", in_place);
              if (!res->measured) continue;
              REQUIRE(res->wrong == 0, info.name, " row ", i, " in place ", in_place, ": ", res->wrong, " wrong");
              REQUIRE(res->us > 0, info.name, " time ", res->us);
              REQUIRE(std::abs(res->algbw - row.bytes / res->us / 1e3) <= 1e-9 * res->algbw, info.name);
              REQUIRE(std::abs(res->busbw - res->algbw * qk::qccl::perf_bus_factor(info.collective, me.nranks)) <=
                          1e-9 * res->algbw,
                      info.name);
            }
          }
          REQUIRE(s.measured == static_cast<int>(rows.size()) * (info.has_in_place ? 2 : 1), info.name);
        }
      REQUIRE_OK(qcclCommDestroy(comm));
    });
    EXPECT_TRUE(r.ok()) << n << " ranks: " << r.summary();
  }
}

TEST(PerfBenchmark, UncheckedRowsSayNotChecked) {
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    PerfOptions o;
    o.check = false;
    o.registered = true;  // qcclMemAlloc buffers
    o.min_bytes = o.max_bytes = 1024;
    o.iters = 1;
    o.warmup = 0;
    PerfBenchmark bench(comm, o);
    const PerfRow row = bench.run_size(1024);
    REQUIRE(row.out_of_place.measured && row.out_of_place.wrong == -1, row.out_of_place.wrong);
    REQUIRE(row.in_place.measured && row.in_place.wrong == -1, row.in_place.wrong);
    bool threw = false;
    try {
      bench.run_size(2048);  // larger than the buffers
    } catch (const qk::ValueError&) {
      threw = true;
    }
    REQUIRE(threw, "run_size beyond max_bytes");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PerfBenchmark, RefusesBadOptions) {
  auto r = run_ranks(2, [](const Rank& me) {
    qcclComm_t comm = me.init();
    auto refused = [](qcclComm_t c, const PerfOptions& o) {
      try {
        PerfBenchmark b(c, o);
      } catch (const qk::ValueError&) {
        return true;
      }
      return false;
    };
    PerfOptions o;
    o.max_bytes = 64;
    REQUIRE(!refused(comm, o), "the defaults");
    REQUIRE(refused(nullptr, o), "a null communicator");
    PerfOptions bad = o;
    bad.root = 2;
    REQUIRE(refused(comm, bad), "root 2 of 2 ranks");
    bad = o;
    bad.factor = 1;
    REQUIRE(refused(comm, bad), "factor 1");
    bad = o;
    bad.min_bytes = 128;
    REQUIRE(refused(comm, bad), "min_bytes > max_bytes");
    bad = o;
    bad.iters = 0;
    REQUIRE(refused(comm, bad), "iters 0");
    bad = o;
    bad.type = static_cast<qcclDataType_t>(qcclNumTypes);
    REQUIRE(refused(comm, bad), "no such type");
    bad = o;
    bad.op = static_cast<qcclRedOp_t>(qcclNumOps);
    REQUIRE(refused(comm, bad), "no such op");
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

// The check sees a wrong element wherever it is: each rank spoils rank + 1
// elements of its result, and the total over the ranks counts them all.
TEST(PerfRank, CheckCountsWrongElementsOnEveryRank) {
  auto r = run_ranks(3, [](const Rank& me) {
    qcclComm_t comm = me.init();
    for (PerfCollective c : {PerfCollective::all_reduce, PerfCollective::reduce_scatter, PerfCollective::all_gather,
                             PerfCollective::alltoallv}) {
      PerfOptions o;
      o.collective = c;
      o.max_bytes = 4096;
      qk::qccl::PerfRank rank(comm, o);
      const size_t count = qk::qccl::perf_count(c, 4096, 4, me.nranks);
      rank.layout(count);
      for (bool in_place : {false, true}) {
        if (in_place && c == PerfCollective::alltoallv) continue;
        REQUIRE(rank.check_once(count, in_place) == 0, "exact");
        float* out = reinterpret_cast<float*>(rank.output(count, in_place));
        for (int k = 0; k <= me.rank; ++k) out[k * 3] += 0.5f;
        const int64_t mine = rank.count_wrong(count, in_place);
        REQUIRE(mine == me.rank + 1, "rank ", me.rank, " counted ", mine);
        const int64_t all = rank.total_wrong(mine);
        REQUIRE(all == 6, "total ", all);  // 1 + 2 + 3
      }
    }
    REQUIRE_OK(qcclCommDestroy(comm));
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PerfMemcpy, SweepsAndTimesEachSize) {
  std::vector<size_t> seen;
  const auto rows = qk::qccl::perf_memcpy(8, 64, 2, 3, 1, [&](const qk::qccl::MemcpyRow& r) { seen.push_back(r.bytes); });
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(seen, (std::vector<size_t>{8, 16, 32, 64}));
  for (const auto& r : rows) {
    EXPECT_GT(r.us, 0);
    EXPECT_NEAR(r.gbps, r.bytes / r.us / 1e3, 1e-9 * r.gbps);
  }
  EXPECT_EQ(qk::qccl::perf_memcpy(0, 4, 2, 1, 0).front().bytes, 1u);  // from one byte
  EXPECT_TRUE(qk::qccl::perf_memcpy(64, 8, 2, 1, 0).empty());
  EXPECT_THROW(qk::qccl::perf_memcpy(8, 64, 1.0, 1, 0), qk::ValueError);
  EXPECT_EQ(qk::qccl::perf_memcpy_table_header(), "#    size(B)   time(us)     GB/s\n");
  EXPECT_EQ(qk::qccl::perf_memcpy_table_row({4096, 0.5, 8.192}), "        4096       0.50     8.19\n");
}

}  // namespace
}  // namespace qccl_test

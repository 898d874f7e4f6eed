// qccl's tuning file and tuner (qk/qccl/tune.h): the file round-trips and
// refuses what is not one; a communicator takes the entry nearest its ranks
// on the host, then the QCCL_*_BYTES overrides; every collective stays exact
// at sizes other than the defaults, the chain chunk agreed between ranks that
// were told different ones; and the tuner leaves every rank at the same
// values it reports.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "algo/tuning.h"
#include "comm.h"
#include "qk/base/error.h"
#include "qk/base/host_info.h"
#include "qk/qccl/tune.h"
#include "ranks.h"

namespace {

using qk::qccl::TuneEntry;
using qk::qccl::TuneFile;
using qk::qccl::TunedSizes;

struct EnvSet {
  EnvSet(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~EnvSet() { ::unsetenv(name_); }
  const char* name_;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "qccl_tune_" + std::to_string(::getpid()) + "_" + name;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TuneEntry entry(int ranks, size_t shm, size_t red, size_t chain, size_t cma) {
  TuneEntry e;
  e.ranks_on_host = ranks;
  e.sizes = TunedSizes{shm, red, chain, cma};
  return e;
}

TEST(TuneFile, RoundTripsAndMergesByRankCount) {
  TuneFile f = qk::qccl::tune_file_for_this_machine();
  EXPECT_EQ(f.cpu, qk::cpu_model_name());
  EXPECT_GT(f.cpus, 0);
  qk::qccl::merge_entry(f, entry(4, 32 << 10, 128 << 10, 512 << 10, 2 << 20));
  TuneEntry two = entry(2, 16 << 10, 64 << 10, 128 << 10, 1 << 20);
  two.trials.push_back({"chain_chunk", 128 << 10, 0.9});
  qk::qccl::merge_entry(f, two);
  qk::qccl::merge_entry(f, entry(4, 64 << 10, 64 << 10, 256 << 10, 4 << 20));  // replaces the first 4
  const std::string path = temp_path("roundtrip.json");
  qk::qccl::write_tune_file(path, f);
  TuneFile g = qk::qccl::read_tune_file(path);
  EXPECT_EQ(g.cpu, f.cpu);
  ASSERT_EQ(g.entries.size(), 2u);
  EXPECT_EQ(g.entries[0].ranks_on_host, 2);  // kept sorted
  EXPECT_EQ(g.entries[0].sizes.shm_slice, size_t(16) << 10);
  EXPECT_EQ(g.entries[0].sizes.chain_chunk, size_t(128) << 10);
  ASSERT_EQ(g.entries[0].trials.size(), 1u);
  EXPECT_EQ(g.entries[0].trials[0].knob, "chain_chunk");
  EXPECT_DOUBLE_EQ(g.entries[0].trials[0].relative_time, 0.9);
  EXPECT_EQ(g.entries[1].sizes.shm_slice, size_t(64) << 10);
  EXPECT_EQ(g.entries[1].sizes.cma_copy_chunk, size_t(4) << 20);
}

// add_to_tune_file (what `qk perf --tune` does per count of ranks) keeps
// this CPU's entries, starts afresh over another CPU's file, and never
// overwrites a file that is not a tuning file.
TEST(TuneFile, AddingAnEntryKeepsThisCpusEntriesAndRefusesOtherFiles) {
  const std::string path = temp_path("add.json");
  std::remove(path.c_str());
  qk::qccl::add_to_tune_file(path, entry(2, 16 << 10, 64 << 10, 256 << 10, 4 << 20));
  qk::qccl::add_to_tune_file(path, entry(4, 32 << 10, 64 << 10, 256 << 10, 4 << 20));
  EXPECT_EQ(qk::qccl::read_tune_file(path).entries.size(), 2u);
  TuneFile foreign = qk::qccl::read_tune_file(path);
  foreign.cpu = "Some Other CPU 9000";
  qk::qccl::write_tune_file(path, foreign);
  bool replaced = false;
  EXPECT_TRUE(qk::qccl::tune_file_to_extend(path, &replaced).entries.empty());
  EXPECT_TRUE(replaced);
  qk::qccl::add_to_tune_file(path, entry(2, 16 << 10, 64 << 10, 256 << 10, 4 << 20));
  TuneFile now = qk::qccl::read_tune_file(path);
  EXPECT_EQ(now.cpu, qk::cpu_model_name());
  EXPECT_EQ(now.entries.size(), 1u);
  const std::string notes = temp_path("notes.txt");
  write_text(notes, "my notes\n");
  EXPECT_THROW(qk::qccl::add_to_tune_file(notes, entry(2, 16 << 10, 64 << 10, 256 << 10, 4 << 20)), qk::ValueError);
  std::ifstream in(notes);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "my notes\n");
}

TEST(TuneFile, NearestEntryTakesTheClosestCountAndTheSmallerOnATie) {
  TuneFile f;
  EXPECT_EQ(qk::qccl::nearest_entry(f, 2), nullptr);
  for (int r : {2, 4, 16}) qk::qccl::merge_entry(f, entry(r, 64 << 10, 64 << 10, 256 << 10, 4 << 20));
  EXPECT_EQ(qk::qccl::nearest_entry(f, 4)->ranks_on_host, 4);
  EXPECT_EQ(qk::qccl::nearest_entry(f, 3)->ranks_on_host, 2);
  EXPECT_EQ(qk::qccl::nearest_entry(f, 9)->ranks_on_host, 4);
  EXPECT_EQ(qk::qccl::nearest_entry(f, 11)->ranks_on_host, 16);
  EXPECT_EQ(qk::qccl::nearest_entry(f, 1000)->ranks_on_host, 16);
}

TEST(TuneFile, RefusesWhatIsNotATuningFileNamingTheProblem) {
  auto message = [](const std::string& path) -> std::string {
    try {
      qk::qccl::read_tune_file(path);
    } catch (const qk::Error& e) {
      return e.message();
    }
    return "read without error";
  };
  EXPECT_NE(message(temp_path("missing.json")).find("cannot open"), std::string::npos);
  const std::string path = temp_path("bad.json");
  write_text(path, "shm_slice = 4096\n");
  EXPECT_NE(message(path).find("not JSON"), std::string::npos) << message(path);
  write_text(path, R"({"format": "something else"})");
  EXPECT_NE(message(path).find("not a qccl tuning file"), std::string::npos) << message(path);
  const std::string head = R"({"format": "qccl-tune 1", "machine": {"cpu": "x", "cpus": 2}, "entries": [)";
  write_text(path, head + R"({"ranks_on_host": 2, "shm_slice": 65536}]})");
  EXPECT_NE(message(path).find("missing or mistyped field"), std::string::npos) << message(path);
  write_text(path, head + R"({"ranks_on_host": 2, "shm_slice": 100, "reduce_slice": 65536,
      "chain_chunk": 262144, "cma_copy_chunk": 4194304}]})");
  EXPECT_NE(message(path).find("shm_slice 100 for 2 ranks is outside"), std::string::npos) << message(path);
  write_text(path, head + R"({"ranks_on_host": 0, "shm_slice": 65536, "reduce_slice": 65536,
      "chain_chunk": 262144, "cma_copy_chunk": 4194304}]})");
  EXPECT_NE(message(path).find("ranks_on_host 0"), std::string::npos) << message(path);
  EXPECT_THROW(qk::qccl::tune_bounds("spin"), qk::ValueError);
}

// Each test its own path: a process reads a path once.
TEST(TunedSizes, TheNearestEntryThenTheEnvironmentSetThem) {
  TuneFile f = qk::qccl::tune_file_for_this_machine();
  qk::qccl::merge_entry(f, entry(2, 16 << 10, 32 << 10, 128 << 10, 1 << 20));
  qk::qccl::merge_entry(f, entry(4, 128 << 10, 256 << 10, 1 << 20, 8 << 20));
  const std::string path = temp_path("entries.json");
  qk::qccl::write_tune_file(path, f);
  EnvSet file("QCCL_TUNE_FILE", path);
  qccl::Tuning t;
  qccl::apply_tuned_sizes(t, 3);  // 2 and 4 are as near: the smaller
  EXPECT_EQ(t.shm_slice, size_t(16) << 10);
  EXPECT_EQ(t.reduce_slice, size_t(32) << 10);
  EXPECT_EQ(t.chain_chunk, size_t(128) << 10);
  EXPECT_EQ(t.cma_copy_chunk, size_t(1) << 20);
  EXPECT_NE(t.sizes_from.find(path), std::string::npos) << t.sizes_from;
  qccl::Tuning four;
  {
    EnvSet chain("QCCL_CHAIN_CHUNK_BYTES", "12288");
    qccl::apply_tuned_sizes(four, 4);
  }
  EXPECT_EQ(four.shm_slice, size_t(128) << 10);
  EXPECT_EQ(four.chain_chunk, 12288u);  // the variable wins over the file
  EXPECT_NE(four.sizes_from.find("QCCL_*_BYTES"), std::string::npos) << four.sizes_from;
  EnvSet tiny("QCCL_CMA_COPY_CHUNK_BYTES", "1000");
  qccl::Tuning bad;
  EXPECT_THROW(qccl::apply_tuned_sizes(bad, 2), qk::ValueError);
}

TEST(TunedSizes, AFileFromAnotherCpuOrNoFileLeavesTheDefaults) {
  TuneFile f = qk::qccl::tune_file_for_this_machine();
  f.cpu = "Some Other CPU 9000";
  qk::qccl::merge_entry(f, entry(2, 16 << 10, 32 << 10, 128 << 10, 1 << 20));
  const std::string path = temp_path("foreign.json");
  qk::qccl::write_tune_file(path, f);
  for (const std::string& p : {path, temp_path("absent.json")}) {
    EnvSet file("QCCL_TUNE_FILE", p);
    qccl::Tuning t;
    qccl::apply_tuned_sizes(t, 2);
    TunedSizes d;
    EXPECT_EQ(t.shm_slice, d.shm_slice) << p;
    EXPECT_EQ(t.reduce_slice, d.reduce_slice) << p;
    EXPECT_EQ(t.chain_chunk, d.chain_chunk) << p;
    EXPECT_EQ(t.cma_copy_chunk, d.cma_copy_chunk) << p;
    EXPECT_EQ(t.sizes_from, "defaults") << p;
  }
}

// Every collective that cuts by the four sizes, at sizes that do not divide
// them, with ranks told different chain chunks (the largest is agreed), with
// the cost model measured and static (the two ways the chunk is agreed).
TEST(TunedSizes, CollectivesStayExactAtOtherSizesAndTheChainChunkIsAgreed) {
  for (const char* cost : {"measured", "static"}) {
    auto r = qccl_test::run_ranks(3, [cost](const qccl_test::Rank& me) {
      ::setenv("QCCL_COST_MODEL", cost, 1);
      const char* chains[] = {"8192", "20480", "12288"};
      ::setenv("QCCL_CHAIN_CHUNK_BYTES", chains[me.rank], 1);
      ::setenv("QCCL_SHM_SLICE_BYTES", "4096", 1);
      ::setenv("QCCL_REDUCE_SLICE_BYTES", "4096", 1);
      ::setenv("QCCL_CMA_COPY_CHUNK_BYTES", "65536", 1);
      ::setenv("QCCL_CMA_MIN_BYTES", "200000", 1);  // the largest calls below go single copy
      qcclComm_t comm = me.init();
      qcclComm_t chain = me.init(1, "chain");
      REQUIRE(chain->tuning.chain_chunk == 20480, "rank ", me.rank);
      REQUIRE(comm->tuning.chain_chunk == 20480, "rank ", me.rank, " chain chunk ", comm->tuning.chain_chunk);
      REQUIRE(comm->cost.chain_chunk == 20480, "rank ", me.rank);
      REQUIRE(comm->tuning.shm_slice == 4096 && comm->tuning.reduce_slice == 4096 &&
                  comm->tuning.cma_copy_chunk == 65536,
              "rank ", me.rank);
      for (size_t count : {size_t(1), size_t(25003), size_t(300007)}) {
        std::vector<float> in(count), out(count * 3);
        for (size_t i = 0; i < count; ++i) in[i] = float((i * 7 + me.rank * 3) % 101);
        for (const char* algo : {"chain", "auto"}) {
          qcclComm_t c = std::string(algo) == "chain" ? chain : comm;
          std::vector<float> b(count, -1.f);
          if (me.rank == 1) b = in;
          REQUIRE_OK(qcclBroadcast(b.data(), b.data(), count, qcclFloat32, 1, c, nullptr));
          for (size_t i = 0; i < count; ++i)
            REQUIRE(b[i] == float((i * 7 + 3) % 101), algo, " broadcast ", count, " at ", i);
          std::vector<float> red(count, -1.f);
          REQUIRE_OK(qcclReduce(in.data(), red.data(), count, qcclFloat32, qcclSum, 2, c, nullptr));
          if (me.rank == 2)
            for (size_t i = 0; i < count; ++i) {
              float want = 0;
              for (int q = 0; q < 3; ++q) want += float((i * 7 + q * 3) % 101);
              REQUIRE(red[i] == want, algo, " reduce ", count, " at ", i);
            }
        }
        REQUIRE_OK(qcclAllReduce(in.data(), out.data(), count, qcclFloat32, qcclSum, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int q = 0; q < 3; ++q) want += float((i * 7 + q * 3) % 101);
          REQUIRE(out[i] == want, "all_reduce ", count, " at ", i);
        }
        REQUIRE_OK(qcclAllGather(in.data(), out.data(), count, qcclFloat32, comm, nullptr));
        for (int q = 0; q < 3; ++q)
          for (size_t i = 0; i < count; ++i)
            REQUIRE(out[q * count + i] == float((i * 7 + q * 3) % 101), "all_gather ", count, " rank ", q, " at ", i);
      }
      qcclCommDestroy(chain);
      qcclCommDestroy(comm);
    }, qccl_test::Options{.num_ids = 2});
    EXPECT_TRUE(r.ok()) << cost << ": " << r.summary();
  }
}

// The tuner's choice is one of its candidates, the same on every rank, and
// the communicator is left at it, still exact. (Which value wins depends on
// the machine: not asserted.)
TEST(Tuner, LeavesEveryRankAtTheSameReportedSizes) {
  auto r = qccl_test::run_ranks(2, [](const qccl_test::Rank& me) {
    qcclComm_t comm = me.init();
    qk::qccl::TuneOptions o;
    o.rounds = 1;
    o.min_ms = 0.1;
    int lines = 0;
    o.progress = [&](const std::string&) { ++lines; };
    TuneEntry e = qk::qccl::tune_communicator(comm, o);
    REQUIRE(e.ranks_on_host == 2, e.ranks_on_host);
    REQUIRE(lines == (me.rank == 0 ? 4 : 0), "progress lines ", lines);
    const TunedSizes& s = e.sizes;
    REQUIRE(comm->tuning.shm_slice == s.shm_slice && comm->tuning.reduce_slice == s.reduce_slice &&
                comm->tuning.chain_chunk == s.chain_chunk && comm->tuning.cma_copy_chunk == s.cma_copy_chunk,
            "rank ", me.rank, " is not at the sizes it reports");
    REQUIRE(comm->cost.chain_chunk == s.chain_chunk, "rank ", me.rank);
    for (const char* knob : {"shm_slice", "reduce_slice", "chain_chunk", "cma_copy_chunk"}) {
      size_t chosen = knob == std::string("shm_slice") ? s.shm_slice
                    : knob == std::string("reduce_slice") ? s.reduce_slice
                    : knob == std::string("chain_chunk") ? s.chain_chunk : s.cma_copy_chunk;
      int tried = 0;
      bool among = false;
      for (const auto& t : e.trials)
        if (t.knob == knob) {
          ++tried;
          among |= t.value == chosen;
          REQUIRE(t.relative_time > 0, knob);
        }
      REQUIRE(tried >= 3 && among, knob, ": ", tried, " candidates, chosen among them: ", among);
    }
    // Every rank the same: the largest and the smallest over the ranks agree.
    double mine[4] = {double(s.shm_slice), double(s.reduce_slice), double(s.chain_chunk), double(s.cma_copy_chunk)};
    double hi[4], lo[4];
    REQUIRE_OK(qcclAllReduce(mine, hi, 4, qcclFloat64, qcclMax, comm, nullptr));
    REQUIRE_OK(qcclAllReduce(mine, lo, 4, qcclFloat64, qcclMin, comm, nullptr));
    REQUIRE(std::memcmp(hi, lo, sizeof hi) == 0, "ranks chose differently");
    std::vector<int32_t> v(1 << 20, me.rank + 1), sum(1 << 20);
    REQUIRE_OK(qcclAllReduce(v.data(), sum.data(), v.size(), qcclInt32, qcclSum, comm, nullptr));
    for (int32_t x : sum) REQUIRE(x == 3, "all_reduce after tuning gave ", x);
    qcclCommDestroy(comm);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Tuner, RefusesASingleRank) {
  auto r = qccl_test::run_ranks(1, [](const qccl_test::Rank& me) {
    qcclComm_t comm = me.init();
    bool refused = false;
    try {
      qk::qccl::tune_communicator(comm);
    } catch (const qk::ValueError& e) {
      refused = std::string(e.what()).find("at least 2 ranks") != std::string::npos;
    }
    REQUIRE(refused, "a 1-rank communicator was tuned");
    qcclCommDestroy(comm);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

// The rank grid against Megatron-core's RankGenerator (expected lists written
// by tests/fixtures/gen_megatron_rank_groups.py), its errors, its printout,
// and ParallelState's process groups on forked ranks.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist_ranks.h"
#include "qk/base/error.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/rank_layout.h"

namespace {

using qk::parallel::GroupKind;
using qk::parallel::ParallelSizes;
using qk::parallel::RankLayout;
using Groups = std::vector<std::vector<int>>;

struct MegatronCase {
  std::string header;
  int world = 1;
  ParallelSizes sizes;
  int dp = 1, edp = 1;
  std::map<std::string, Groups> groups;
};

Groups parse_groups(const std::string& s) {
  Groups out;
  std::stringstream gs(s);
  std::string g;
  while (std::getline(gs, g, ';')) {
    std::vector<int> ranks;
    std::stringstream rs(g);
    std::string r;
    while (std::getline(rs, r, ',')) ranks.push_back(std::stoi(r));
    out.push_back(ranks);
  }
  return out;
}

std::vector<MegatronCase> load_cases() {
  std::ifstream f(std::string(QK_SOURCE_DIR) + "/tests/fixtures/megatron/rank_groups.txt");
  EXPECT_TRUE(f.good()) << "run /usr/bin/python3 tests/fixtures/gen_megatron_rank_groups.py";
  std::vector<MegatronCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ls(line);
    std::string word;
    ls >> word;
    if (word == "case") {
      MegatronCase c;
      c.header = line;
      while (ls >> word) {
        const auto eq = word.find('=');
        const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
        if (k == "order") {
          c.sizes.order = v;
          continue;
        }
        const int n = std::stoi(v);
        if (k == "world") c.world = n;
        if (k == "tp") c.sizes.tensor_model_parallel_size = n;
        if (k == "pp") c.sizes.pipeline_model_parallel_size = n;
        if (k == "cp") c.sizes.context_parallel_size = n;
        if (k == "ep") c.sizes.expert_model_parallel_size = n;
        if (k == "etp") c.sizes.expert_tensor_parallel_size = n;
        if (k == "dp") c.dp = n;
        if (k == "edp") c.edp = n;
      }
      cases.push_back(c);
    } else if (word != "end") {
      std::string lists;
      ls >> lists;
      cases.back().groups[word] = parse_groups(lists);
    }
  }
  return cases;
}

TEST(RankLayout, EveryGroupMatchesMegatronsGenerator) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 10u);
  for (const MegatronCase& c : cases) {
    SCOPED_TRACE(c.header);
    const RankLayout l = RankLayout::make(c.world, c.sizes);
    EXPECT_EQ(l.data_parallel_size(), c.dp);
    EXPECT_EQ(l.expert_data_parallel_size(), c.edp);
    ASSERT_EQ(c.groups.size(), std::size(qk::parallel::kAllGroupKinds));
    for (GroupKind k : qk::parallel::kAllGroupKinds)
      EXPECT_EQ(l.groups(k), c.groups.at(qk::parallel::group_kind_name(k))) << qk::parallel::group_kind_name(k);
  }
}

TEST(RankLayout, MegatronsDocstringExample) {
  // initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4.
  ParallelSizes s;
  s.tensor_model_parallel_size = 2;
  s.pipeline_model_parallel_size = 4;
  const RankLayout l = RankLayout::make(16, s);
  EXPECT_EQ(l.data_parallel_size(), 2);
  EXPECT_EQ(l.groups(GroupKind::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(l.groups(GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(l.groups(GroupKind::pp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(l.group_of(GroupKind::embedding, 13), (std::vector<int>{1, 13}));
  EXPECT_TRUE(l.group_of(GroupKind::embedding, 5).empty());  // a middle stage
  EXPECT_EQ(l.rank_in(GroupKind::embedding, 5), -1);
  EXPECT_EQ(l.rank_in(GroupKind::pp, 9), 2);
  // generate_masked_orthogonal_rank_groups' own example: sizes [2, 3, 4], mask dp.
  const Groups dp = qk::parallel::masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(dp[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(dp[7], (std::vector<int>{19, 21, 23}));
}

std::string error_of(int world, const ParallelSizes& s) {
  try {
    RankLayout::make(world, s);
  } catch (const qk::ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(RankLayout, SizesThatDoNotFitAreErrorsNamingTheFlags) {
  ParallelSizes s;
  s.tensor_model_parallel_size = 2;
  s.pipeline_model_parallel_size = 3;
  std::string m = error_of(8, s);
  EXPECT_NE(m.find("--tensor-model-parallel-size (2) x --pipeline-model-parallel-size (3)"), std::string::npos) << m;
  EXPECT_NE(m.find("world size (8)"), std::string::npos) << m;

  s = {};
  s.context_parallel_size = 2;
  m = error_of(4, s);
  EXPECT_NE(m.find("--context-parallel-size 2"), std::string::npos) << m;

  s = {};
  s.tensor_model_parallel_size = 2;
  s.expert_model_parallel_size = 3;
  m = error_of(4, s);
  EXPECT_NE(m.find("--expert-model-parallel-size (3)"), std::string::npos) << m;

  s = {};
  s.tensor_model_parallel_size = 0;
  EXPECT_NE(error_of(4, s).find("--tensor-model-parallel-size must be at least 1"), std::string::npos);
  s = {};
  s.order = "tp-xp-dp";
  EXPECT_NE(error_of(4, s).find("unknown name 'xp'"), std::string::npos);
}

TEST(RankLayout, FormatNamesEveryGroup) {
  ParallelSizes s;
  s.tensor_model_parallel_size = 2;
  s.pipeline_model_parallel_size = 2;
  const std::string f = RankLayout::make(8, s).format();
  EXPECT_NE(f.find("world 8 = tp 2 x cp 1 x dp 2 x pp 2 (order tp-cp-ep-dp-pp)"), std::string::npos) << f;
  EXPECT_NE(f.find("  tp                    4 x 2    [0 1] [2 3] [4 5] [6 7]\n"), std::string::npos) << f;
  EXPECT_NE(f.find("  pp                    4 x 2    [0 4] [1 5] [2 6] [3 7]\n"), std::string::npos) << f;
  EXPECT_NE(f.find("  expert_dp "), std::string::npos) << f;
}

// Every rank builds the groups and checks each against the layout: members
// (global ranks) and a sum over the group that only its members contribute to.
void check_state(const ParallelSizes& sizes, int n) {
  auto r = qk_dist_test::on_ranks(n, "parallel-state", [sizes, n](const qccl_test::Rank& me,
                                                                 qk::dist::ProcessGroup& world) {
    auto ps = qk::parallel::ParallelState::create(world, sizes);
    const RankLayout& l = ps->layout();
    for (GroupKind k : qk::parallel::kAllGroupKinds) {
      const std::vector<int> want = l.group_of(k, me.rank);
      const auto& g = ps->group(k);
      if (want.empty()) {
        REQUIRE(g == nullptr, qk::parallel::group_kind_name(k), ": rank ", me.rank, " got a group");
        continue;
      }
      REQUIRE(g && g->global_ranks() == want && g->rank() == l.rank_in(k, me.rank), qk::parallel::group_kind_name(k),
              ": members or rank differ from the layout");
      qk::Tensor x = qk::full({1}, double(1 << me.rank), qk::DType::i64);
      g->all_reduce(x);
      int64_t expect = 0;
      for (int m : want) expect += int64_t{1} << m;
      REQUIRE(x.data_ptr<int64_t>()[0] == expect, qk::parallel::group_kind_name(k), ": sum ",
              x.data_ptr<int64_t>()[0], ", expected ", expect);
    }
    REQUIRE(ps->tensor_model_parallel_size() == sizes.tensor_model_parallel_size, "tp size");
    REQUIRE(ps->data_parallel_size() * ps->tensor_model_parallel_size() * ps->pipeline_model_parallel_size() == n,
            "dp size");
    REQUIRE(ps->is_pipeline_first_stage() == (ps->pipeline_model_parallel_rank() == 0), "first stage");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ParallelState, GroupsOnFourRanksMatchTheLayout) {
  ParallelSizes tp2;
  tp2.tensor_model_parallel_size = 2;
  check_state(tp2, 4);
  ParallelSizes tp2pp2;
  tp2pp2.tensor_model_parallel_size = 2;
  tp2pp2.pipeline_model_parallel_size = 2;
  check_state(tp2pp2, 4);
  ParallelSizes ep2;
  ep2.expert_model_parallel_size = 2;
  ep2.pipeline_model_parallel_size = 2;
  check_state(ep2, 4);
}

TEST(ParallelState, ABadLayoutFailsOnEveryRankBeforeAnyGroupIsMade) {
  auto r = qk_dist_test::on_ranks(2, "parallel-state-bad", [](const qccl_test::Rank&, qk::dist::ProcessGroup& world) {
    ParallelSizes s;
    s.tensor_model_parallel_size = 4;
    bool threw = false;
    try {
      qk::parallel::ParallelState::create(world, s);
    } catch (const qk::ValueError& e) {
      threw = std::string(e.what()).find("--tensor-model-parallel-size (4)") != std::string::npos;
    }
    REQUIRE(threw, "tp 4 on 2 ranks was accepted");
    world.barrier();  // the world group is still usable
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

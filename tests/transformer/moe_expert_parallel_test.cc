// The MoE layer over expert-parallel (and tensor-parallel, with sequence
// parallelism) ranks on forked processes, against the unsplit layer.
//
// The expert-parallel group is carved from the data-parallel ranks
// (Megatron's layout), so each data-parallel rank routes its own batch. Each
// rank also builds the unsplit layer (expert- and tensor-parallel size 1,
// same seed) and runs every data-parallel rank's batch through it; then:
//  - the rank's output and input gradient equal the reference's on its batch
//    (its sequence shard under tensor parallelism);
//  - an expert's weight gradients on the rank holding it equal the
//    reference's, summed over every batch (the tokens of all ranks reached it);
//  - the router's and shared experts' gradients, summed over the data-parallel
//    group as data parallelism will, equal the reference's;
//  - tensor-parallel shards put together are the reference's tensors;
//  - the statistics count every rank's routes.
// Both dispatchers, capacity drops (factor 1), top-2 of 4 experts, a shared
// expert, biases, padding to capacity, the shared-expert overlap and the
// router's aux and z losses; and the
// dispatchers alone when one rank's experts get no token.
// Tolerance: f32 sums in another order, 1e-5 of each tensor's largest entry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "dist/dist_ranks.h"
#include "moe/token_dispatcher.h"
#include "moe_testing.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/sharding.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {
namespace {

using moe_test::rel_diff;
using moe_test::seeded_randn;
using parallel::GroupKind;

constexpr int64_t kBatch = 2, kSeq = 8;

// world ranks as tp x ep (ep carved from the data-parallel ranks), one
// compute thread each (see tests/parallel/tp_ranks.h).
template <typename F>
qccl_test::Result on_moe_ranks(int world, int tp, int ep, const std::string& token, F body) {
  const char* before = std::getenv("QK_NUM_THREADS");
  const std::string saved = before ? before : "";
  ::setenv("QK_NUM_THREADS", "1", 1);
  auto r = qk_dist_test::on_ranks(world, token, [&](const qccl_test::Rank&, dist::ProcessGroup& w) {
    parallel::ParallelSizes sizes;
    sizes.tensor_model_parallel_size = tp;
    sizes.expert_model_parallel_size = ep;
    body(*parallel::ParallelState::create(w, sizes));
  });
  if (before)
    ::setenv("QK_NUM_THREADS", saved.c_str(), 1);
  else
    ::unsetenv("QK_NUM_THREADS");
  return r;
}

Tensor batch_of(int64_t dp_rank, int64_t hidden) { return seeded_randn({kBatch, kSeq, hidden}, 100 + dp_rank); }
Tensor output_grad_of(int64_t dp_rank, int64_t hidden) { return seeded_randn({kBatch, kSeq, hidden}, 200 + dp_rank); }

// This tensor-parallel rank's sequence shard of [B, T, C].
Tensor sequence_shard(const Tensor& t, const parallel::ParallelState& ps) {
  const int64_t len = t.size(1) / ps.tensor_model_parallel_size();
  return t.narrow(1, ps.tensor_model_parallel_rank() * len, len).contiguous();
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  const double d = rel_diff(got, want);
  REQUIRE(d <= 1e-5, what, ": relative difference ", d);
}

void compare_with_unsplit(const TransformerConfig& base, const parallel::ParallelState& ps, const std::string& name) {
  const int dp_size = ps.data_parallel_size(), dp_rank = ps.data_parallel_rank();
  const int64_t c = base.hidden_size;

  // The unsplit layer on every data-parallel rank's batch; gradients add up.
  manual_seed(1234);
  MoELayer ref(base, 1);
  std::vector<Tensor> ref_out, ref_dx;
  std::vector<double> ref_losses;
  std::vector<int64_t> ref_tokens(static_cast<size_t>(base.num_moe_experts), 0);
  int64_t ref_dropped = 0;
  for (int d = 0; d < dp_size; ++d) {
    const Tensor x = batch_of(d, c).requires_grad_();
    const Tensor out = ref(x);
    out.backward(output_grad_of(d, c));
    ref_out.push_back(out);
    ref_dx.push_back(x.grad());
    for (size_t e = 0; e < ref_tokens.size(); ++e) ref_tokens[e] += ref->last_stats().tokens_per_expert[e];
    ref_dropped += ref->last_stats().dropped_routes;
    ref_losses.push_back(ref->last_stats().load_balancing_loss + ref->last_stats().z_loss);
  }
  REQUIRE(ref_dropped > 0 || !base.moe_expert_capacity_factor, name, ": the case wants capacity drops");

  TransformerConfig pc = base;
  pc.expert_model_parallel_size = ps.expert_model_parallel_size();
  pc.tensor_model_parallel_size = ps.tensor_model_parallel_size();
  pc.sequence_parallel = pc.tensor_model_parallel_size > 1;
  const auto tp = ps.group(GroupKind::tp);
  manual_seed(1234);
  MoELayer layer(pc, 1, MoEParallel{.ep = ps.group(GroupKind::ep), .tp = tp});
  const Tensor x = sequence_shard(batch_of(dp_rank, c), ps).requires_grad_();
  const Tensor out = layer(x);
  require_close(out, sequence_shard(ref_out[static_cast<size_t>(dp_rank)], ps), name + " output");
  out.backward(sequence_shard(output_grad_of(dp_rank, c), ps));
  require_close(x.grad(), sequence_shard(ref_dx[static_cast<size_t>(dp_rank)], ps), name + " input gradient");
  REQUIRE(layer->last_stats().tokens_per_expert == ref_tokens, name, ": tokens per expert differ");
  REQUIRE(layer->last_stats().dropped_routes == ref_dropped, name, ": dropped ", layer->last_stats().dropped_routes,
          " routes, the reference ", ref_dropped);
  const double losses = layer->last_stats().load_balancing_loss + layer->last_stats().z_loss;
  REQUIRE(std::abs(losses - ref_losses[static_cast<size_t>(dp_rank)]) <= 1e-6 * (1 + std::abs(losses)), name,
          ": router losses ", losses, ", the reference ", ref_losses[static_cast<size_t>(dp_rank)]);
  REQUIRE((losses > 0) == (base.moe_aux_loss_coeff > 0), name, ": router losses ", losses);

  // Gradients: partial ones summed over TP, dense ones over data parallelism,
  // shards put together.
  parallel::all_reduce_partial_gradients(*layer, *tp);
  nn::NamedTensors grads;
  for (const auto& p : layer->named_parameters()) {
    REQUIRE(p.value().grad().defined(), name, ": no gradient for ", p.key());
    Tensor g = p.value().grad().clone();
    if (!is_expert_parameter(p.key())) ps.require(GroupKind::dp).all_reduce(g);
    grads.insert(p.key(), g);
  }
  const nn::NamedTensors full = parallel::gather_shards(grads, parallel::tensor_parallel_shard_specs(*layer), *tp);
  const nn::NamedTensors want = ref->named_parameters();
  for (const auto& g : full) {
    REQUIRE(want.contains(g.key()), name, ": the reference has no ", g.key());
    require_close(g.value(), want[g.key()].grad(), name + " gradient of " + g.key());
  }
  REQUIRE(layer->experts->first_expert() == ps.expert_model_parallel_rank() * 2, name, ": local experts");
}

std::vector<std::pair<std::string, TransformerConfig>> cases() {
  TransformerConfig c = moe_test::tiny_moe_config();
  c.moe_expert_capacity_factor = 1.0;
  c.moe_shared_expert_intermediate_size = 24;
  std::vector<std::pair<std::string, TransformerConfig>> out;
  out.emplace_back("allgather", c);
  TransformerConfig a2a = c;
  a2a.moe_token_dispatcher_type = MoETokenDispatcher::alltoall;
  a2a.moe_grouped_gemm = a2a.moe_permute_fusion = true;
  a2a.moe_shared_expert_overlap = true;
  a2a.moe_aux_loss_coeff = 0.1;  // the router's losses and their gradients too
  a2a.moe_z_loss_coeff = 0.01;
  out.emplace_back("alltoall, grouped, fused, overlap, aux and z losses", a2a);
  TransformerConfig padded = a2a;
  padded.moe_pad_expert_input_to_capacity = true;
  padded.moe_shared_expert_overlap = false;
  padded.add_bias_linear = true;
  out.emplace_back("alltoall, padded, biases", padded);
  TransformerConfig ag_padded = c;
  ag_padded.moe_pad_expert_input_to_capacity = true;
  ag_padded.add_bias_linear = true;
  ag_padded.gated_linear_unit = false;
  ag_padded.activation_func = Activation::gelu;
  out.emplace_back("allgather, padded, biases, gelu", ag_padded);
  return out;
}

void run_all_cases(const parallel::ParallelState& ps) {
  for (const auto& [name, config] : cases()) compare_with_unsplit(config, ps, name);
}

// The dispatchers alone, with every route going to rank 0's experts (0 and
// 1): rank 1's experts get no token (or only padding), and "experts" that
// double their rows give out[n] = 2 x[n] sum_e probs[n, e].
void dispatch_to_one_rank(const parallel::ParallelState& ps) {
  const int64_t n = 6, c = 4;
  for (MoETokenDispatcher type : {MoETokenDispatcher::allgather, MoETokenDispatcher::alltoall}) {
    for (bool pad : {false, true}) {
      const std::string name = std::string(to_string(type)) + (pad ? ", padded" : "");
      TransformerConfig config = moe_test::tiny_moe_config();
      config.moe_token_dispatcher_type = type;
      config.expert_model_parallel_size = 2;
      config.moe_pad_expert_input_to_capacity = pad;
      if (pad) config.moe_expert_capacity_factor = 2.0;  // capacity ceil(2 x 6 x 2 / 4) = 6
      const auto dispatcher = make_token_dispatcher(config, ps.group(GroupKind::ep));
      Tensor map = zeros({n, 4}, DType::boolean);
      for (int64_t t = 0; t < n; ++t) map.data_ptr<bool>()[t * 4] = map.data_ptr<bool>()[t * 4 + 1] = true;
      const int rank = ps.expert_model_parallel_rank();
      const Tensor x = seeded_randn({n, c}, 10 + rank).requires_grad_();
      const Tensor probs = (abs(seeded_randn({n, 4}, 20 + rank)) * map.to(DType::f32)).requires_grad_();
      const Tensor rows = dispatcher->dispatch(x, probs, map, 0, {});
      const int64_t want_rows = rank == 0 ? 2 * n * 2 : 0;  // both ranks' 6 tokens, to 2 experts
      const int64_t padding = pad ? 2 * 6 * 2 - want_rows : 0;
      REQUIRE(rows.size(0) == want_rows + padding, name, ": ", rows.size(0), " rows on rank ", rank);
      REQUIRE(dispatcher->padding_rows() == padding, name, ": padding ", dispatcher->padding_rows());
      REQUIRE(dispatcher->global_tokens_per_expert() == (std::vector<int64_t>{12, 12, 0, 0}), name, ": counts");
      const Tensor out = dispatcher->combine(rows * 2.0);
      const Tensor weight = probs.detach().sum({1}).unsqueeze(1);
      require_close(out, x.detach() * weight * 2.0, name + " output");
      out.backward(ones({n, c}));
      require_close(x.grad(), weight.expand({n, c}) * 2.0, name + " input gradient");
      require_close(probs.grad(), x.detach().sum({1}).unsqueeze(1).expand({n, 4}) * 2.0 * map.to(DType::f32),
                    name + " probability gradient");
    }
  }
}

// Ranks with different numbers of tokens: the alltoall dispatcher moves
// them (each rank's layer output equals the unsplit layer's on its tokens);
// the allgather one, and padding to capacity, refuse on every rank alike.
void unequal_token_counts(const parallel::ParallelState& ps) {
  TransformerConfig base = moe_test::tiny_moe_config();
  base.moe_token_dispatcher_type = MoETokenDispatcher::alltoall;
  manual_seed(1234);
  MoELayer ref(base, 1);
  TransformerConfig pc = base;
  pc.expert_model_parallel_size = 2;
  manual_seed(1234);
  MoELayer layer(pc, 1, MoEParallel{.ep = ps.group(GroupKind::ep)});
  const int rank = ps.expert_model_parallel_rank();
  const Tensor x = seeded_randn({1, rank == 0 ? 6 : 3, base.hidden_size}, 30 + rank);
  require_close(layer(x), ref(x), "alltoall with 6 and 3 tokens");
  for (bool pad : {false, true}) {
    TransformerConfig c = pc;
    if (pad) {
      c.moe_expert_capacity_factor = 4.0;
      c.moe_pad_expert_input_to_capacity = true;
    } else {
      c.moe_token_dispatcher_type = MoETokenDispatcher::allgather;
    }
    MoELayer refusing(c, 1, MoEParallel{.ep = ps.group(GroupKind::ep)});
    bool refused = false;
    try {
      refusing(x);
    } catch (const ValueError&) {
      refused = true;
    }
    REQUIRE(refused, pad ? "padding" : "allgather", " with 6 and 3 tokens did not refuse");
  }
}

TEST(MoEExpertParallel, TwoExpertRanksEqualTheUnsplitLayer) {
  auto r = on_moe_ranks(2, /*tp=*/1, /*ep=*/2, "moe_ep2", [](const parallel::ParallelState& ps) {
    run_all_cases(ps);
    dispatch_to_one_rank(ps);
    unequal_token_counts(ps);
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(MoEExpertParallel, TwoExpertByTwoTensorRanksWithSequenceParallelismEqualTheUnsplitLayer) {
  auto r = on_moe_ranks(4, /*tp=*/2, /*ep=*/2, "moe_ep2_tp2", run_all_cases);
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace
}  // namespace qk::transformer

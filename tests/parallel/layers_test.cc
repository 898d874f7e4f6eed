// Each tensor-parallel layer against its unsplit counterpart built from the
// same seed, at TP = 2 and 4: weights (the shards are slices of the unsplit
// layer's), forward outputs and every gradient (gathered), in f32.
//
// Tolerances: the shards' GEMMs run over other sizes than the unsplit one and
// row-parallel sums add partial products in another order, so outputs and
// gradients agree to a relative 2e-6 (max |diff| / max |reference|); weights,
// embeddings and everything that only moves data agree exactly.
#include <gtest/gtest.h>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/nn/embedding.h"
#include "qk/nn/init.h"
#include "qk/nn/linear.h"
#include "qk/parallel/layers.h"
#include "qk/parallel/mappings.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"

namespace {

using qk::Tensor;
using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_close;
using qk_tp_test::require_equal;
namespace par = qk::parallel;

constexpr double kTol = 2e-6;

Tensor leaf(const Tensor& t) {
  Tensor x = t.clone();
  x.requires_grad_(true);
  return x;
}

// Megatron-style init: N(0, 0.02) weights, zero bias (on the full master weight).
void init_normal(const Tensor& w, const Tensor& b) {
  qk::nn::init::normal_(w, 0.0, 0.02);
  if (b.defined()) qk::nn::init::zeros_(b);
}

// This rank's shard of a gradient put back together across the group.
Tensor gathered(const Tensor& shard, par::ShardSpec spec, const Group& tp) {
  qk::nn::NamedTensors local;
  local.insert("t", shard);
  return par::gather_shards(local, {{"t", spec}}, *tp)["t"];
}

void column_matches_linear(int n) {
  auto r = on_tp_ranks(n, "col" + std::to_string(n), [n](int rank, const Group& tp) {
    const int64_t in = 6, out = 8;
    qk::manual_seed(11);
    qk::nn::Linear ref(in, out);
    init_normal(ref->weight, ref->bias);
    qk::manual_seed(11);
    par::ColumnParallelLinear col(in, out, tp, par::ColumnParallelLinearOptions().gather_output(true).init(init_normal));
    require_equal(col->weight, ref->weight.narrow(0, rank * out / n, out / n), "weight shard");
    require_equal(col->bias, ref->bias.narrow(0, rank * out / n, out / n), "bias shard");

    qk::manual_seed(5);
    Tensor x0 = qk::randn({3, in}), up = qk::randn({3, out});
    Tensor x = leaf(x0), xr = leaf(x0);
    Tensor y = col(x), yr = ref(xr);
    require_close(y, yr, kTol, "forward (gathered output)");
    qk::sum(y * up).backward();
    qk::sum(yr * up).backward();
    require_close(x.grad(), xr.grad(), kTol, "input gradient (all-reduced)");
    require_close(gathered(col->weight.grad(), {0, 1}, tp), ref->weight.grad(), kTol, "weight gradient");
    require_close(gathered(col->bias.grad(), {0, 1}, tp), ref->bias.grad(), kTol, "bias gradient");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(ColumnParallelLinear, EqualsLinearAtTp2) { column_matches_linear(2); }
TEST(ColumnParallelLinear, EqualsLinearAtTp4) { column_matches_linear(4); }

TEST(ColumnParallelLinear, StrideTwoKeepsMatchingGateAndUpRows) {
  auto r = on_tp_ranks(2, "col-stride", [](int rank, const Group& tp) {
    const int64_t in = 4, ffn = 6;  // fc1 of a gated unit: [gate (6); up (6)] rows
    qk::manual_seed(3);
    qk::nn::Linear ref(in, 2 * ffn);
    qk::manual_seed(3);
    par::ColumnParallelLinear col(in, 2 * ffn, tp, par::ColumnParallelLinearOptions().stride(2));
    const Tensor want = qk::cat({ref->weight.narrow(0, rank * 3, 3), ref->weight.narrow(0, ffn + rank * 3, 3)}, 0);
    require_equal(col->weight, want, "[gate_r; up_r]");
    require_equal(gathered(col->weight, {0, 2}, tp), ref->weight, "unshard with stride 2");
    // Each rank's SwiGLU over its halves is a slice of the unsplit one's.
    Tensor x = qk::randn({2, in});
    auto halves = qk::chunk(col(x), 2, -1);
    auto full = qk::chunk(ref(x), 2, -1);
    require_close(qk::silu(halves[0]) * halves[1], (qk::silu(full[0]) * full[1]).narrow(1, rank * 3, 3), kTol,
                  "swiglu on the halves");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

void row_matches_linear(int n, bool input_is_parallel) {
  auto r = on_tp_ranks(n, "row" + std::to_string(n), [n, input_is_parallel](int rank, const Group& tp) {
    const int64_t in = 8, out = 5;
    qk::manual_seed(21);
    qk::nn::Linear ref(in, out);
    init_normal(ref->weight, ref->bias);
    qk::nn::init::uniform_(ref->bias, -1, 1);  // a non-zero bias: added once, after the sum
    qk::manual_seed(21);
    par::RowParallelLinear row(in, out, tp, par::RowParallelLinearOptions().input_is_parallel(input_is_parallel).init(
                                                [](const Tensor& w, const Tensor& b) {
                                                  init_normal(w, b);
                                                  qk::nn::init::uniform_(b, -1, 1);
                                                }));
    require_equal(row->weight, ref->weight.narrow(1, rank * in / n, in / n), "weight shard (columns)");
    require_equal(row->bias, ref->bias, "bias (replicated)");

    qk::manual_seed(6);
    Tensor x0 = qk::randn({4, in}), up = qk::randn({4, out});
    Tensor x = leaf(input_is_parallel ? x0.narrow(1, rank * in / n, in / n).contiguous() : x0), xr = leaf(x0);
    Tensor y = row(x), yr = ref(xr);
    require_close(y, yr, kTol, "forward");
    qk::sum(y * up).backward();
    qk::sum(yr * up).backward();
    require_close(x.grad(), input_is_parallel ? xr.grad().narrow(1, rank * in / n, in / n) : xr.grad(), kTol,
                  "input gradient");
    require_close(gathered(row->weight.grad(), {1, 1}, tp), ref->weight.grad(), kTol, "weight gradient");
    require_close(row->bias.grad(), ref->bias.grad(), kTol, "bias gradient");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(RowParallelLinear, EqualsLinearAtTp2) { row_matches_linear(2, true); }
TEST(RowParallelLinear, EqualsLinearAtTp2ScatteringItsInput) { row_matches_linear(2, false); }
TEST(RowParallelLinear, EqualsLinearAtTp4) { row_matches_linear(4, true); }

TEST(TensorParallelMlp, ColumnThenRowEqualsTheUnsplitMlp) {
  auto r = on_tp_ranks(2, "mlp", [](int, const Group& tp) {
    const int64_t c = 6, f = 12;
    qk::manual_seed(8);
    qk::nn::Linear fc1(c, f), fc2(f, c);
    qk::manual_seed(8);
    par::ColumnParallelLinear pfc1(c, f, tp);
    par::RowParallelLinear pfc2(f, c, tp, par::RowParallelLinearOptions().input_is_parallel(true));
    qk::manual_seed(9);
    Tensor x0 = qk::randn({2, 3, c});
    Tensor x = leaf(x0), xr = leaf(x0);
    Tensor y = pfc2(qk::gelu(pfc1(x))), yr = fc2(qk::gelu(fc1(xr)));
    require_close(y, yr, kTol, "forward");
    qk::sum(y * y).backward();
    qk::sum(yr * yr).backward();
    require_close(x.grad(), xr.grad(), kTol, "input gradient");
    require_close(gathered(pfc1->weight.grad(), {0, 1}, tp), fc1->weight.grad(), kTol, "fc1 weight gradient");
    require_close(gathered(pfc2->weight.grad(), {1, 1}, tp), fc2->weight.grad(), kTol, "fc2 weight gradient");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

void embedding_matches(int n) {
  auto r = on_tp_ranks(n, "emb" + std::to_string(n), [n](int rank, const Group& tp) {
    const int64_t vocab = 16, dim = 5;
    auto init = [](const Tensor& w, const Tensor&) { qk::nn::init::normal_(w, 0.0, 0.02); };
    qk::manual_seed(4);
    qk::nn::Embedding ref(vocab, dim);
    init(ref->weight, Tensor());
    qk::manual_seed(4);
    par::VocabParallelEmbedding emb(vocab, dim, tp, par::VocabParallelEmbeddingOptions().init(init));
    require_equal(emb->weight, ref->weight.narrow(0, rank * vocab / n, vocab / n), "table rows");
    // Every rank's range, repeats, first and last ids.
    Tensor ids = qk::from_vector<int64_t>({0, 15, 3, 3, 8, 12, 7, 1}, {2, 4});
    Tensor y = emb(ids), yr = ref(ids);
    require_equal(y, yr, "forward");
    Tensor up = qk::randn({2, 4, dim});
    qk::sum(y * up).backward();
    qk::sum(yr * up).backward();
    require_equal(gathered(emb->weight.grad(), {0, 1}, tp), ref->weight.grad(), "weight gradient");
    bool threw = false;
    try {
      emb(qk::from_vector<int64_t>({16}, {1}));
    } catch (const qk::IndexError&) {
      threw = true;
    }
    REQUIRE(threw, "id 16 of a 16-row table was accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(VocabParallelEmbedding, EqualsEmbeddingAtTp2) { embedding_matches(2); }
TEST(VocabParallelEmbedding, EqualsEmbeddingAtTp4) { embedding_matches(4); }

TEST(TensorParallelLayers, SequenceParallelLayersEqualTheUnsplitOnes) {
  auto r = on_tp_ranks(2, "sp-layers", [](int rank, const Group& tp) {
    const int64_t b = 2, t = 4, c = 6, f = 8, half = t / 2;
    qk::manual_seed(13);
    qk::nn::Linear fc1(c, f), fc2(f, c);
    qk::manual_seed(13);
    par::ColumnParallelLinear pfc1(c, f, tp, par::ColumnParallelLinearOptions().sequence_parallel(true));
    par::RowParallelLinear pfc2(f, c, tp,
                                par::RowParallelLinearOptions().input_is_parallel(true).sequence_parallel(true));
    REQUIRE(pfc2->partial_gradient_parameters() == std::vector<std::string>{"bias"}, "row bias is sequence-parallel");
    qk::manual_seed(14);
    Tensor x0 = qk::randn({b, t, c});
    // Each rank holds its half of the sequence in and out.
    Tensor x = leaf(x0.narrow(1, rank * half, half).contiguous()), xr = leaf(x0);
    Tensor y = pfc2(qk::relu(pfc1(x))), yr = fc2(qk::relu(fc1(xr)));
    require_close(y, yr.narrow(1, rank * half, half), kTol, "forward (this rank's sequence half)");
    Tensor up = qk::randn({b, t, c});
    qk::sum(y * up.narrow(1, rank * half, half)).backward();
    qk::sum(yr * up).backward();
    require_close(x.grad(), xr.grad().narrow(1, rank * half, half), kTol, "input gradient");
    require_close(gathered(pfc1->weight.grad(), {0, 1}, tp), fc1->weight.grad(), kTol, "fc1 weight gradient");
    require_close(gathered(pfc2->weight.grad(), {1, 1}, tp), fc2->weight.grad(), kTol, "fc2 weight gradient");
    // The row bias saw half the sequence: summed over the group it is whole.
    struct Net : qk::nn::Module {};
    auto net = std::make_shared<Net>();
    net->register_module("fc2", pfc2);
    REQUIRE(par::partial_gradient_parameter_names(*net) == std::vector<std::string>{"fc2.bias"}, "names");
    par::all_reduce_partial_gradients(*net, *tp);
    require_close(pfc2->bias.grad(), fc2->bias.grad(), kTol, "fc2 bias gradient after the sum");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Sharding, StridedShardsRoundTrip) {
  Tensor full = qk::arange(0, 24, 1).reshape({12, 2});
  for (int size : {1, 2, 3}) {
    std::vector<Tensor> shards;
    for (int r = 0; r < size; ++r) shards.push_back(par::shard_tensor(full, {0, 2}, r, size));
    EXPECT_EQ(shards[0].size(0), 12 / size);
    EXPECT_EQ(qk_tp_test::rel_diff(par::unshard_tensor(shards, {0, 2}), full), 0.0) << size;
  }
  // Rank 1 of 2 with stride 2: rows 3..5 and 9..11.
  Tensor s = par::shard_tensor(full, {0, 2}, 1, 2);
  EXPECT_EQ(s.data_ptr<float>()[0], 6.0f);
  EXPECT_EQ(s.data_ptr<float>()[6], 18.0f);
  EXPECT_THROW(par::shard_tensor(full, {0, 1}, 0, 5), qk::ValueError);
}

TEST(Sharding, FullStateDictsLoadAtAnotherSize) {
  auto r = on_tp_ranks(2, "state", [](int rank, const Group& tp) {
    struct Net : qk::nn::Module {
      explicit Net(const Group& tp) {
        emb = register_module("emb", par::VocabParallelEmbedding(8, 4, tp));
        fc1 = register_module("fc1", par::ColumnParallelLinear(4, 8, tp, par::ColumnParallelLinearOptions().stride(2)));
        fc2 = register_module("fc2", par::RowParallelLinear(8, 4, tp, par::RowParallelLinearOptions()));
      }
      par::VocabParallelEmbedding emb{nullptr};
      par::ColumnParallelLinear fc1{nullptr};
      par::RowParallelLinear fc2{nullptr};
    };
    // The same model unsplit on each rank (a group of one), from the same seed.
    auto solo = std::shared_ptr<qk::dist::ProcessGroup>(tp->split(rank, 0, "solo"));
    qk::manual_seed(1);
    auto whole = std::make_shared<Net>(solo);
    qk::manual_seed(1);
    auto split = std::make_shared<Net>(tp);
    const auto specs = par::tensor_parallel_shard_specs(*split);
    REQUIRE(specs.size() == 4 && specs.at("fc1.weight").stride == 2 && specs.at("fc2.weight").dim == 1 &&
                !specs.count("fc2.bias"),
            "specs");
    // Gathered shards are the unsplit model's state, name by name.
    const auto full = par::full_state_dict(*split, *tp);
    const auto want = whole->state_dict();
    REQUIRE(full.size() == want.size(), "names");
    for (const auto& item : want) require_equal(full[item.key()], item.value(), item.key());
    // Load it into a differently seeded split model: its shards come back.
    qk::manual_seed(2);
    auto other = std::make_shared<Net>(tp);
    par::load_full_state_dict(*other, full, *tp);
    const auto mine = split->state_dict();
    for (const auto& item : other->state_dict()) require_equal(item.value(), mine[item.key()], item.key());
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

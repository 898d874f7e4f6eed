// The training library under tensor parallelism, on two forked ranks: a
// sequence-parallel MLP (column- then row-parallel, so the row bias's
// gradient is partial on each rank) trained by MixedPrecisionOptimizer with
// the tensor-parallel hook against the unsplit MLP trained on each rank:
// the gradient norm, clipped AdamW steps, the skip on a NaN seen by one rank
// only, and checkpoints gathered whole by name (weights, Adam moments) that
// load back at tensor size 2 and into the unsplit model.
//
// Tolerances (f32): the shards sum their products in another order, so
// weights and moments agree to a relative 1e-5 of each tensor's largest
// entry and norms to 1e-6 (measured: about 1e-7).
#include <gtest/gtest.h>

#include <cmath>

#include "data/test_util.h"
#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"
#include "qk/parallel/layers.h"
#include "qk/parallel/sharding.h"
#include "qk/tensor/generator.h"
#include "qk/train/train.h"

namespace {

using namespace qk;
using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_close;
using qk_tp_test::require_equal;

constexpr int64_t kIn = 8, kHidden = 16, kOut = 4, kBatch = 2, kSeq = 4;

class TpMlpImpl : public nn::Module {
 public:
  explicit TpMlpImpl(const Group& tp) : tp_(tp) {
    fc1 =
        register_module("fc1", parallel::ColumnParallelLinear(
                                   kIn, kHidden, tp, parallel::ColumnParallelLinearOptions().sequence_parallel(true)));
    fc2 = register_module("fc2", parallel::RowParallelLinear(kHidden, kOut, tp,
                                                             parallel::RowParallelLinearOptions()
                                                                 .input_is_parallel(true)
                                                                 .sequence_parallel(true)));
  }
  // x: this rank's sequence block [B, T/tp, in] -> [B, T/tp, out].
  Tensor forward(const Tensor& x) { return fc2(tanh(fc1(x))); }
  parallel::ColumnParallelLinear fc1{nullptr};
  parallel::RowParallelLinear fc2{nullptr};

 private:
  Group tp_;
};
QK_MODULE(TpMlp);

class MlpImpl : public nn::Module {
 public:
  MlpImpl() {
    fc1 = register_module("fc1", nn::Linear(kIn, kHidden));
    fc2 = register_module("fc2", nn::Linear(kHidden, kOut));
  }
  Tensor forward(const Tensor& x) { return fc2(tanh(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
QK_MODULE(Mlp);

struct Batch {
  Tensor x, target;  // full [B, T, in], [B, T, out]
};
Batch batch(int step) {
  Generator g(40 + static_cast<uint64_t>(step));
  return {randn({kBatch, kSeq, kIn}, {}, g), randn({kBatch, kSeq, kOut}, {}, g)};
}
Tensor seq_block(const Tensor& t, const Group& tp) {
  const int64_t n = kSeq / tp->size();
  return t.narrow(1, tp->rank() * n, n).contiguous();
}

optim::MixedPrecisionOptimizer make_optimizer(nn::Module& m) {
  // A clip far below the norm, so every step is clipped by the global norm.
  return optim::MixedPrecisionOptimizer(optim::megatron_param_groups(m),
                                        optim::adamw(optim::AdamWOptions(1e-2).weight_decay(0.1)), nullptr,
                                        {.clip_grad = 0.05});
}

// Sum of (y - target)^2: on a rank, its sequence block's part.
Tensor loss_of(const Tensor& y, const Tensor& target) { return sum((y - target) * (y - target)); }

nn::NamedTensors whole(nn::Module& m, const Group& tp) { return parallel::full_state_dict(m, *tp); }

void require_state_close(const nn::NamedTensors& got, const nn::NamedTensors& want, double tol,
                         const std::string& what) {
  REQUIRE(got.size() == want.size(), what, ": ", got.size(), " tensors, expected ", want.size());
  for (const auto& item : want) {
    const Tensor* g = got.find(item.key());
    REQUIRE(g != nullptr, what, ": no ", item.key());
    require_close(*g, item.value(), tol, what + " " + item.key());
  }
}

nn::NamedTensors named(const nn::TensorMap& m) {
  nn::NamedTensors out;
  for (const auto& [k, t] : m) out.insert(k, t);
  return out;
}

TEST(TensorParallelTraining, ClippedStepsCheckpointsAndSkipsEqualTheUnsplitModel) {
  qk::test::TempDir dir("tp_train");
  const std::string root = dir.path();
  auto r = on_tp_ranks(2, "tp-train", [&root](int rank, const Group& tp) {
    manual_seed(5);
    Mlp ref;
    manual_seed(5);
    TpMlp par(tp);
    require_state_close(whole(*par, tp), ref->state_dict(), 0.0, "initial weights");
    const parallel::TensorParallel ctx = parallel::tensor_parallel_of(*par, tp.get());
    REQUIRE(ctx.partial_gradients == std::vector<std::string>{"fc2.bias"}, "the row bias is partial under SP");
    optim::MixedPrecisionOptimizer ref_opt = make_optimizer(*ref), opt = make_optimizer(*par);
    opt.set_tensor_parallel(ctx);

    for (int step = 0; step < 3; ++step) {
      const Batch b = batch(step);
      ref_opt.zero_grad();
      opt.zero_grad();
      loss_of(ref(b.x), b.target).backward();
      loss_of(par(seq_block(b.x, tp)), seq_block(b.target, tp)).backward();
      const optim::OptimizerStepResult want = ref_opt.step(), got = opt.step();
      REQUIRE(got.updated && want.updated, "step ", step);
      REQUIRE(std::abs(got.grad_norm - want.grad_norm) <= 1e-6 * want.grad_norm, "step ", step, ": grad norm ",
              got.grad_norm, ", unsplit ", want.grad_norm);
      REQUIRE(want.grad_norm > 0.05 * 10, "the clip acts (norm ", want.grad_norm, ")");
      require_state_close(whole(*par, tp), ref->state_dict(), 1e-5, "weights after step " + std::to_string(step));
    }

    // A NaN in one rank's shard skips the step on both ranks.
    {
      const Batch b = batch(9);
      ref_opt.zero_grad();
      opt.zero_grad();
      loss_of(par(seq_block(b.x, tp)), seq_block(b.target, tp)).backward();
      if (rank == 1) par->fc1->weight.grad().data_ptr<float>()[0] = std::nanf("");
      const optim::OptimizerStepResult got = opt.step();
      REQUIRE(!got.updated && got.found_inf && std::isnan(got.grad_norm), "rank ", rank, " stepped past a NaN");
      require_state_close(whole(*par, tp), ref->state_dict(), 1e-5, "weights after the skipped step");
    }

    // Checkpoint: whole tensors by name, as the unsplit model's.
    const train::TrainState st{par.get(), &opt, nullptr};
    const train::TrainTensors t = train::train_tensors(st, ctx);
    require_state_close(named(t.weights), ref->state_dict(), 1e-5, "gathered weights");
    const auto ref_state = ref_opt.state_by_name();
    REQUIRE(t.optimizer->tensors.size() == ref_state.tensors.size(), "optimizer entries");
    for (const auto& [k, v] : ref_state.tensors) {
      REQUIRE(t.optimizer->tensors.count(k), "no ", k);
      require_close(t.optimizer->tensors.at(k), v, 1e-5, "gathered " + k);
    }
    REQUIRE(t.optimizer->metadata.at("step/fc1.weight") == ref_state.metadata.at("step/fc1.weight"), "step count");
    train::CheckpointMeta meta;
    meta.progress.iteration = 3;
    if (rank == 0) train::save_checkpoint(CheckpointDir(root), "iter_3", st, meta, &t);
    tp->barrier();
    const std::optional<CheckpointInfo> c = train::find_checkpoint(root);
    REQUIRE(c.has_value(), "no checkpoint in ", root);

    // Loaded at tensor size 2: the shards and moments this rank had.
    manual_seed(77);
    TpMlp par2(tp);
    optim::MixedPrecisionOptimizer opt2 = make_optimizer(*par2);
    parallel::TensorParallel ctx2 = parallel::tensor_parallel_of(*par2, tp.get());
    opt2.set_tensor_parallel(ctx2);
    train::LoadOptions lo;
    lo.tp = &ctx2;
    train::load_train_state(c->path + "/", c->meta, c->path, {par2.get(), &opt2, nullptr}, lo);
    require_state_close(par2->state_dict(), par->state_dict(), 0.0, "shards reloaded at TP 2");
    const auto mine = opt.state_by_name(), back = opt2.state_by_name();
    for (const auto& [k, v] : mine.tensors) require_equal(back.tensors.at(k), v, "reloaded " + k);

    // Loaded into the unsplit model: the unsplit run's state; both continue alike.
    manual_seed(78);
    Mlp one;
    optim::MixedPrecisionOptimizer one_opt = make_optimizer(*one);
    train::load_train_state(c->path + "/", c->meta, c->path, {one.get(), &one_opt, nullptr}, {});
    require_state_close(one->state_dict(), ref->state_dict(), 1e-5, "whole weights reloaded at TP 1");
    const Batch b = batch(4);
    for (auto* o : {&ref_opt, &one_opt, &opt2}) o->zero_grad();
    loss_of(ref(b.x), b.target).backward();
    loss_of(one(b.x), b.target).backward();
    loss_of(par2(seq_block(b.x, tp)), seq_block(b.target, tp)).backward();
    ref_opt.step();
    one_opt.step();
    opt2.step();
    require_state_close(one->state_dict(), ref->state_dict(), 1e-5, "TP 1 after resuming");
    require_state_close(whole(*par2, tp), ref->state_dict(), 1e-5, "TP 2 after resuming");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

// The vocabulary-parallel cross entropy against qk::cross_entropy on the
// gathered logits, with ignore_index and a loss mask, at TP = 2 and 4.
// Tolerance: relative 1e-6 for the loss and 2e-6 for gradients (the sums of
// exponentials are taken per shard and added; the reference sums the row whole).
#include <gtest/gtest.h>

#include "parallel/tp_ranks.h"
#include "qk/autograd/functions.h"
#include "qk/parallel/cross_entropy.h"
#include "qk/parallel/mappings.h"
#include "qk/tensor/generator.h"

namespace {

using qk::Tensor;
using qk_tp_test::Group;
using qk_tp_test::on_tp_ranks;
using qk_tp_test::require_close;
namespace par = qk::parallel;

Tensor leaf(const Tensor& t) {
  Tensor x = t.clone();
  x.requires_grad_(true);
  return x;
}

void matches_cross_entropy(int n) {
  auto r = on_tp_ranks(n, "ce" + std::to_string(n), [n](int rank, const Group& tp) {
    const int64_t tokens = 7, vocab = 16, per = vocab / n;
    qk::manual_seed(31);
    Tensor logits0 = qk::randn({tokens, vocab}) * 3.0;
    // Targets on every rank's shard, the first and last ids, and two ignored tokens.
    Tensor target = qk::from_vector<int64_t>({0, 15, 5, -100, 9, 12, -100}, {tokens});
    Tensor mask = qk::from_vector<float>({1, 1, 0, 1, 1, 0.5f, 1}, {tokens});

    Tensor full = leaf(logits0);
    Tensor shard = leaf(logits0.narrow(1, rank * per, per).contiguous());
    Tensor loss = par::vocab_parallel_cross_entropy(shard, target, *tp);
    Tensor ref = qk::cross_entropy(full, target, -100, 0.0, qk::ops::Reduction::none);
    require_close(loss, ref, 1e-6, "per-token loss");
    REQUIRE(loss.data_ptr<float>()[3] == 0.0f && loss.data_ptr<float>()[6] == 0.0f, "ignored tokens have loss 0");

    // Megatron's masked mean and its gradient.
    Tensor mean = qk::sum(loss * mask) / qk::sum(mask);
    Tensor mean_ref = qk::sum(ref * mask) / qk::sum(mask);
    require_close(mean, mean_ref, 1e-6, "masked mean");
    mean.backward();
    mean_ref.backward();
    require_close(shard.grad(), full.grad().narrow(1, rank * per, per), 2e-6, "logit gradient (this rank's columns)");
    for (int64_t v = 0; v < per; ++v)
      REQUIRE(shard.grad().data_ptr<float>()[3 * per + v] == 0.0f, "an ignored token got a gradient");

    // Through an output layer as the model uses it: logits never gathered,
    // hidden-state gradients all-reduced by the copy into the region.
    qk::manual_seed(32);
    Tensor h0 = qk::randn({tokens, 5}), w0 = qk::randn({vocab, 5});
    Tensor h = leaf(h0), hr = leaf(h0);
    Tensor w = leaf(w0.narrow(0, rank * per, per).contiguous()), wr = leaf(w0);
    Tensor l = qk::sum(par::vocab_parallel_cross_entropy(
                   qk::linear(par::copy_to_tensor_model_parallel_region(h, *tp), w), target, *tp) * mask);
    Tensor lr = qk::sum(qk::cross_entropy(qk::linear(hr, wr), target, -100, 0.0, qk::ops::Reduction::none) * mask);
    require_close(l, lr, 1e-6, "output-layer loss");
    l.backward();
    lr.backward();
    require_close(h.grad(), hr.grad(), 2e-6, "hidden gradient");
    require_close(w.grad(), wr.grad().narrow(0, rank * per, per), 2e-6, "output weight gradient (this rank's rows)");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(VocabParallelCrossEntropy, EqualsCrossEntropyAtTp2) { matches_cross_entropy(2); }
TEST(VocabParallelCrossEntropy, EqualsCrossEntropyAtTp4) { matches_cross_entropy(4); }

TEST(VocabParallelCrossEntropy, Bf16LogitsAndLargeValuesStayFinite) {
  auto r = on_tp_ranks(2, "ce-bf16", [](int rank, const Group& tp) {
    // Logits far from 0 (the max is subtracted first) and bf16 inputs.
    Tensor logits0 = qk::from_vector<float>({1000, 990, 1005, 1001, -50, -60, -40, -55}, {2, 4});
    Tensor target = qk::from_vector<int64_t>({2, 1}, {2});
    Tensor full = leaf(logits0.to(qk::DType::bf16));
    Tensor shard = leaf(logits0.narrow(1, 2 * rank, 2).contiguous().to(qk::DType::bf16));
    Tensor loss = par::vocab_parallel_cross_entropy(shard, target, *tp);
    Tensor ref = qk::cross_entropy(full.to(qk::DType::f32), target, -100, 0.0, qk::ops::Reduction::none);
    REQUIRE(loss.dtype() == qk::DType::f32, "loss dtype");
    require_close(loss, ref, 1e-5, "loss");  // small losses: the f32 reference rounds more
    qk::sum(loss).backward();
    qk::sum(ref).backward();
    REQUIRE(shard.grad().dtype() == qk::DType::bf16, "gradient in the logits' dtype");
    require_close(shard.grad(), full.grad().narrow(1, 2 * rank, 2), 1e-2, "gradient (bf16)");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(VocabParallelCrossEntropy, ATargetOutsideTheVocabularyIsAnError) {
  auto r = on_tp_ranks(2, "ce-bad", [](int, const Group& tp) {
    bool threw = false;
    try {
      par::vocab_parallel_cross_entropy(qk::zeros({1, 4}), qk::from_vector<int64_t>({8}, {1}), *tp);
    } catch (const qk::IndexError& e) {
      threw = std::string(e.what()).find("outside the vocabulary [0, 8)") != std::string::npos;
    }
    REQUIRE(threw, "target 8 of a vocabulary of 8 was accepted");
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace

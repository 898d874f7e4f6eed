// Sampling (TokenSampler) on fixed logits, and generate() against the full
// forward re-run each step.
#include "qk/transformer/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "qk/autograd/functions.h"

namespace qk::transformer {
namespace {

// ---- TokenSampler ----

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Draws n ids and counts them.
std::map<int64_t, int64_t> histogram(TokenSampler& s, const std::vector<float>& logits, int n) {
  std::map<int64_t, int64_t> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits.data(), static_cast<int64_t>(logits.size()))];
  return h;
}

// Every drawn id is allowed, and its frequency is its probability within 5 sigma.
void expect_distribution(const std::map<int64_t, int64_t>& h, const std::map<int64_t, double>& want, int n) {
  for (const auto& [id, count] : h) EXPECT_TRUE(want.count(id)) << "drew id " << id << ", outside the allowed set";
  for (const auto& [id, p] : want) {
    const double f = h.count(id) ? static_cast<double>(h.at(id)) / n : 0.0;
    EXPECT_NEAR(f, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9) << "id " << id;
  }
}

TEST(TokenSampler, GreedyTakesTheFirstLargest) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  TokenSampler greedy({.temperature = 0});
  EXPECT_EQ(greedy.sample(l.data(), 5), 1);
  TokenSampler top1({.temperature = 0.7, .top_k = 1});
  EXPECT_EQ(top1.sample(l.data(), 5), 1);
  EXPECT_EQ(top1.candidates(l.data(), 5), (std::vector<std::pair<int64_t, double>>{{1, 1.0}}));
}

TEST(TokenSampler, TopKOneEqualsGreedyOnRandomRows) {
  Generator g(3);
  const Tensor rows = randn({200, 1000}, {}, g) * 3.0;
  TokenSampler greedy({.temperature = 0}), top1({.temperature = 1.3, .top_k = 1}, 9);
  for (int64_t r = 0; r < 200; ++r) {
    const std::vector<float> l = rows.select(0, r).to_vector<float>();
    const int64_t want = std::max_element(l.begin(), l.end()) - l.begin();
    EXPECT_EQ(greedy.sample(l.data(), 1000), want);
    EXPECT_EQ(top1.sample(l.data(), 1000), want);
  }
}

TEST(TokenSampler, FullDistributionAtTemperatureOne) {
  const std::vector<double> p = {0.05, 0.4, 0.1, 0.3, 0.15};
  TokenSampler s({}, 11);
  const int n = 40000;
  expect_distribution(histogram(s, log_probs(p), n), {{0, 0.05}, {1, 0.4}, {2, 0.1}, {3, 0.3}, {4, 0.15}}, n);
}

TEST(TokenSampler, TemperatureScalesTheLogits) {
  const std::vector<float> l = {1.0f, 2.0f, 0.0f};
  TokenSampler s({.temperature = 0.5});
  // softmax(l / 0.5) = softmax(2, 4, 0)
  const double z = std::exp(2.0) + std::exp(4.0) + 1.0;
  const auto c = s.candidates(l.data(), 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].first, 1);
  EXPECT_NEAR(c[0].second, std::exp(4.0) / z, 1e-12);
  EXPECT_EQ(c[1].first, 0);
  EXPECT_NEAR(c[1].second, std::exp(2.0) / z, 1e-12);
  EXPECT_NEAR(c[2].second, 1.0 / z, 1e-12);
  const int n = 40000;
  expect_distribution(histogram(s, l, n), {{1, std::exp(4.0) / z}, {0, std::exp(2.0) / z}, {2, 1.0 / z}}, n);
}

TEST(TokenSampler, TopKNeverSamplesOutsideTheK) {
  // Probabilities 0.3, 0.25, 0.2, 0.15, 0.1 in shuffled id order.
  const std::vector<double> p = {0.15, 0.3, 0.1, 0.2, 0.25};
  TokenSampler s({.top_k = 3}, 12);
  const int n = 40000;
  expect_distribution(histogram(s, log_probs(p), n), {{1, 0.3 / 0.75}, {4, 0.25 / 0.75}, {3, 0.2 / 0.75}}, n);
}

TEST(TokenSampler, TopPKeepsTheSmallestNucleus) {
  const std::vector<double> p = {0.1, 0.5, 0.05, 0.2, 0.15};
  // Most likely first: 0.5, 0.2, 0.15 (mass before: 0, 0.5, 0.7 < 0.8), then 0.1 has 0.85 before it.
  TokenSampler s({.top_p = 0.8}, 13);
  const int n = 40000;
  expect_distribution(histogram(s, log_probs(p), n), {{1, 0.5 / 0.85}, {3, 0.2 / 0.85}, {4, 0.15 / 0.85}}, n);
  // A nucleus smaller than the first id keeps that one id.
  TokenSampler tiny({.top_p = 0.01}, 14);
  EXPECT_EQ(histogram(tiny, log_probs(p), 100), (std::map<int64_t, int64_t>{{1, 100}}));
  // top-k first, then top-p over the renormalised top-k: {0.5, 0.2} / 0.7 -> 0.714 reaches 0.7.
  TokenSampler both({.top_k = 2, .top_p = 0.7}, 15);
  expect_distribution(histogram(both, log_probs(p), n), {{1, 1.0}}, n);
}

// A vocabulary-sized row: the growing sorted prefix finds the same nucleus
// as sorting everything.
TEST(TokenSampler, TopPOnALargeVocabularyMatchesAFullSort) {
  Generator g(4);
  const std::vector<float> l = (randn({50000}, {}, g) * 2.0).to_vector<float>();
  for (double top_p : {0.3, 0.9, 0.999}) {
    std::vector<int64_t> ids(l.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const double m = l[ids[0]];
    double z = 0;
    for (float x : l) z += std::exp(x - m);
    std::vector<int64_t> nucleus;
    double before = 0;
    for (int64_t id : ids) {
      if (before >= top_p) break;
      nucleus.push_back(id);
      before += std::exp(l[id] - m) / z;
    }
    TokenSampler s({.top_p = top_p}, 16);
    const auto c = s.candidates(l.data(), static_cast<int64_t>(l.size()));
    ASSERT_EQ(c.size(), nucleus.size()) << "top_p " << top_p;
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].first, nucleus[i]);
    const std::set<int64_t> allowed(nucleus.begin(), nucleus.end());
    for (int i = 0; i < 300; ++i) {
      const int64_t id = s.sample(l.data(), static_cast<int64_t>(l.size()));
      ASSERT_TRUE(allowed.count(id)) << id << " outside the nucleus";
    }
  }
}

TEST(TokenSampler, SeedsReproduce) {
  const std::vector<float> l = log_probs({0.2, 0.2, 0.2, 0.2, 0.2});
  TokenSampler a({}, 77), b({}, 77), c({}, 78);
  std::vector<int64_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(a.sample(l.data(), 5));
    db.push_back(b.sample(l.data(), 5));
    dc.push_back(c.sample(l.data(), 5));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(TokenSampler, RejectsBadOptionsAndLogits) {
  EXPECT_THROW(TokenSampler({.temperature = -1}), ValueError);
  EXPECT_THROW(TokenSampler({.top_k = -2}), ValueError);
  EXPECT_THROW(TokenSampler({.top_p = 0}), ValueError);
  EXPECT_THROW(TokenSampler({.top_p = 1.5}), ValueError);
  TokenSampler s;
  const std::vector<float> nan = {0.0f, NAN};
  EXPECT_THROW(s.sample(nan.data(), 2), ValueError);
  EXPECT_THROW(s.sample(nan.data(), 0), ValueError);
}

// ---- generate ----

TransformerConfig tiny(bool llama) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = 100;  // padded to 128
  if (llama) {
    c.position_embedding_type = PositionEmbeddingType::rope;
    c.normalization = Normalization::RMSNorm;
    c.set_swiglu();
    c.num_query_groups = 2;
    c.add_bias_linear = false;
    c.share_embeddings_and_output_weights = false;
  }
  return c;
}

GPTModel random_model(const TransformerConfig& c, uint64_t seed) {
  manual_seed(seed);
  GPTModel m(c);
  NoGradGuard no_grad;
  Generator g(seed + 1);
  for (Tensor& p : m->parameters()) p.copy_(p + randn(p.shape(), {}, g) * 0.2);
  m->eval();
  return m;
}

// Greedy decoding by re-running the whole sequence each step: no cache.
std::vector<int64_t> greedy_by_full_forward(GPTModel& m, std::vector<int64_t> seq, int64_t steps) {
  NoGradGuard no_grad;
  std::vector<int64_t> out;
  const int64_t v = m->config().vocab_size;
  for (int64_t i = 0; i < steps; ++i) {
    const Tensor logits = m(from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    const std::vector<float> last =
        logits.select(1, logits.size(1) - 1).narrow(1, 0, v).contiguous().to_vector<float>();
    const int64_t id = std::max_element(last.begin(), last.end()) - last.begin();
    out.push_back(id);
    seq.push_back(id);
  }
  return out;
}

void check_greedy_equals_full_forward(bool llama) {
  GPTModel m = random_model(tiny(llama), 51);
  const std::vector<int64_t> prompt = {5, 17, 3, 99, 42};
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.sampling.temperature = 0;
  const GenerateResult r = generate(*m, {prompt}, o);
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.tokens[0], greedy_by_full_forward(m, prompt, 20));
  EXPECT_EQ(r.finish[0], FinishReason::length);
  // top-k 1 at any temperature is greedy too.
  o.sampling = {.temperature = 1.5, .top_k = 1};
  EXPECT_EQ(generate(*m, {prompt}, o).tokens[0], r.tokens[0]);
}

TEST(Generate, GreedyWithCacheEqualsFullForwardArgmaxGpt2) { check_greedy_equals_full_forward(false); }
TEST(Generate, GreedyWithCacheEqualsFullForwardArgmaxLlama) { check_greedy_equals_full_forward(true); }

TEST(Generate, BatchedPromptsOfDifferentLengthsEqualSeparateRuns) {
  GPTModel m = random_model(tiny(true), 52);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {8}, {9, 10, 11}};
  for (const SamplingOptions& s : {SamplingOptions{.temperature = 0}, SamplingOptions{.top_k = 5}}) {
    GenerateOptions o;
    o.max_new_tokens = 9;
    o.sampling = s;
    const GenerateResult batched = generate(*m, prompts, o);
    ASSERT_EQ(batched.tokens.size(), 3u);
    if (!s.greedy()) continue;  // sampled rows share one generator: only greedy rows must match alone
    for (size_t r = 0; r < prompts.size(); ++r) {
      const GenerateResult alone = generate(*m, {prompts[r]}, o);
      EXPECT_EQ(batched.tokens[r], alone.tokens[0]) << "row " << r;
      EXPECT_EQ(alone.tokens[0].size(), 9u);
    }
    EXPECT_EQ(batched.prompt_tokens, 11);
    EXPECT_EQ(batched.new_tokens, 27);
  }
}

TEST(Generate, SeedsReproduceSampling) {
  GPTModel m = random_model(tiny(false), 53);
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.sampling = {.temperature = 1.0, .top_p = 0.95};
  o.seed = 5;
  const auto a = generate(*m, {{1, 2, 3}, {4, 5, 6}}, o).tokens;
  const auto b = generate(*m, {{1, 2, 3}, {4, 5, 6}}, o).tokens;
  EXPECT_EQ(a, b);
  o.seed = 6;
  EXPECT_NE(generate(*m, {{1, 2, 3}, {4, 5, 6}}, o).tokens, a);
}

TEST(Generate, StopsAtStopTokensAndStreamsEachToken) {
  GPTModel m = random_model(tiny(false), 54);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0;
  const std::vector<int64_t> free_run = generate(*m, {{7, 8}}, o).tokens[0];
  ASSERT_EQ(free_run.size(), 12u);
  // Stop at the 5th token: the 4 before it come out, the stop token does not.
  o.stop_tokens = {free_run[4]};
  std::vector<int64_t> streamed;
  o.on_token = [&](int64_t row, int64_t id) {
    EXPECT_EQ(row, 0);
    streamed.push_back(id);
    return true;
  };
  const GenerateResult r = generate(*m, {{7, 8}}, o);
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(r.tokens[0], std::vector<int64_t>(free_run.begin(), free_run.begin() + first));
  EXPECT_EQ(streamed, r.tokens[0]);
  EXPECT_EQ(r.finish[0], FinishReason::stop);
  // The callback ends a row by returning false.
  o.stop_tokens.clear();
  o.on_token = [&](int64_t, int64_t) { return false; };
  const GenerateResult one = generate(*m, {{7, 8}}, o);
  EXPECT_EQ(one.tokens[0].size(), 1u);
  EXPECT_EQ(one.finish[0], FinishReason::callback);
}

TEST(Generate, StaysInsideTheContextAndTheRealVocabulary) {
  TransformerConfig c = tiny(false);
  c.share_embeddings_and_output_weights = false;
  GPTModel m = random_model(c, 55);
  {
    // Make the padding rows (100..127) of the output layer win every argmax:
    // the final norm outputs all ones, so logits are row sums.
    NoGradGuard no_grad;
    m->decoder->final_layernorm->weight.fill_(0.0);
    m->decoder->final_layernorm->bias.fill_(1.0);
    m->output_layer->weight.narrow(0, 100, 28).fill_(1.0);
    Tensor real = m->output_layer->weight.narrow(0, 0, 100);
    real.copy_(real * 0.01);
  }
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 0;
  std::vector<int64_t> prompt(30, 3);  // learned positions: 32 in all
  const GenerateResult r = generate(*m, {prompt}, o);
  EXPECT_EQ(r.tokens[0].size(), 2u);  // positions 30 and 31
  EXPECT_EQ(r.finish[0], FinishReason::length);
  for (int64_t id : r.tokens[0]) EXPECT_LT(id, 100);
  o.vocab_size = 7;
  const GenerateResult small = generate(*m, {{1}}, o);
  EXPECT_EQ(small.tokens[0].size(), 10u);
  for (int64_t id : small.tokens[0]) EXPECT_LT(id, 7);
  o.vocab_size = 129;
  EXPECT_THROW(generate(*m, {{1}}, o), ValueError);
}

TEST(Generate, CountsTokensAndTime) {
  GPTModel m = random_model(tiny(true), 56);
  GenerateOptions o;
  o.max_new_tokens = 6;
  const GenerateResult r = generate(*m, {{1, 2}, {3, 4}}, o);
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_EQ(r.new_tokens, 12);
  EXPECT_EQ(r.decode_tokens, 10);  // each row's first token comes from the prompt step
  EXPECT_GT(r.prefill_seconds, 0);
  EXPECT_GT(r.decode_seconds, 0);
  EXPECT_GT(r.tokens_per_second(), 0);
  o.max_new_tokens = 0;
  EXPECT_EQ(generate(*m, {{1}}, o).new_tokens, 0);
}

TEST(Generate, RejectsBadPrompts) {
  GPTModel m = random_model(tiny(false), 57);
  EXPECT_THROW(generate(*m, {}), ValueError);
  EXPECT_THROW(generate(*m, {{}}), ValueError);
  EXPECT_THROW(generate(*m, {{1, 100}}), ValueError);                     // outside the vocabulary
  EXPECT_THROW(generate(*m, {std::vector<int64_t>(33, 1)}), ValueError);  // longer than the context
  m->train();                                                             // dropout on: generation needs eval()
  EXPECT_THROW(generate(*m, {{1}}), ValueError);
}

}  // namespace
}  // namespace qk::transformer

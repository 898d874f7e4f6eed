// generate(): the prompt through the model once, then one token per row and
// step against the KV cache, sampled by a TokenSampler.
#include "qk/transformer/generate.h"

#include <algorithm>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/base/timer.h"

namespace qk::transformer {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::callback: return "callback";
  }
  return "?";
}

namespace {

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, const TransformerConfig& c) {
  QK_CHECK(!prompts.empty(), "generate: no prompts");
  for (size_t r = 0; r < prompts.size(); ++r) {
    QK_CHECK(!prompts[r].empty(), "generate: prompt ", r,
             " is empty; give at least one token (e.g. the BOS or EOD id)");
    for (int64_t id : prompts[r])
      QK_CHECK(id >= 0 && id < c.vocab_size, "generate: prompt ", r, " has token ", id, ", outside the vocabulary [0, ",
               c.vocab_size, ")");
    QK_CHECK(static_cast<int64_t>(prompts[r].size()) <= c.max_position_embeddings, "generate: prompt ", r, " has ",
             prompts[r].size(), " tokens, more than max_position_embeddings (", c.max_position_embeddings, ")");
  }
}

}  // namespace

GenerateResult generate(GPTModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& o) {
  const TransformerConfig& c = model.config();
  check_prompts(prompts, c);
  QK_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  const int64_t padded = c.padded_vocab_size();
  const int64_t vocab = o.vocab_size > 0 ? o.vocab_size : c.vocab_size;
  QK_CHECK(vocab <= padded, "generate: vocab_size ", vocab, " exceeds the model's output size ", padded);
  TokenSampler sampler(o.sampling, o.seed);

  const auto rows = static_cast<int64_t>(prompts.size());
  size_t shortest = prompts[0].size(), longest = 0;
  for (const auto& p : prompts) {
    shortest = std::min(shortest, p.size());
    longest = std::max(longest, p.size());
  }
  // Positions 0 .. context-1; the last sampled token is never fed back.
  const int64_t context =
      std::min<int64_t>(static_cast<int64_t>(longest) + o.max_new_tokens, c.max_position_embeddings);

  GenerateResult res;
  res.tokens.resize(rows);
  res.finish.assign(rows, FinishReason::length);
  std::vector<bool> active(rows, o.max_new_tokens > 0);
  for (const auto& p : prompts) res.prompt_tokens += static_cast<int64_t>(p.size());
  if (o.max_new_tokens == 0) return res;

  NoGradGuard no_grad;
  KVCache cache = model.make_kv_cache(rows, context);
  Timer timer;
  // The shared prompt prefix in one step; only its last logits are needed.
  std::vector<int64_t> feed;
  feed.reserve(rows * shortest);
  for (const auto& p : prompts) feed.insert(feed.end(), p.begin(), p.begin() + static_cast<int64_t>(shortest));
  Tensor logits =
      model.forward_step(from_vector(feed, {rows, static_cast<int64_t>(shortest)}), cache, /*last_only=*/true)
          .contiguous();
  bool prefill = true;
  feed.resize(rows);
  for (int64_t pos = static_cast<int64_t>(shortest);; ++pos) {
    // logits[r] predicts position pos of row r.
    const float* data = logits.data_ptr<float>();
    bool any = false;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& prompt = prompts[r];
      if (pos < static_cast<int64_t>(prompt.size())) {  // still reading its prompt
        feed[r] = prompt[pos];
        any = true;
        continue;
      }
      feed[r] = 0;  // finished rows are fed a placeholder
      if (!active[r]) continue;
      const int64_t id = sampler.sample(data + r * padded, vocab);
      if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), id) != o.stop_tokens.end()) {
        active[r] = false;
        res.finish[r] = FinishReason::stop;
        continue;
      }
      res.tokens[r].push_back(id);
      ++res.new_tokens;
      if (!prefill && res.tokens[r].size() > 1) ++res.decode_tokens;
      feed[r] = id;
      if (o.on_token && !o.on_token(r, id)) {
        active[r] = false;
        res.finish[r] = FinishReason::callback;
      } else if (static_cast<int64_t>(res.tokens[r].size()) == o.max_new_tokens || pos + 1 >= context) {
        active[r] = false;
      } else {
        any = true;
      }
    }
    // Time to first token: until every row has sampled once.
    if (prefill && pos >= static_cast<int64_t>(longest)) {
      prefill = false;
      res.prefill_seconds = timer.seconds();
      timer.reset();
    }
    if (!any || pos + 1 >= context) break;
    logits = model.forward_step(from_vector(feed, {rows, 1}), cache).contiguous();
  }
  if (prefill)
    res.prefill_seconds = timer.seconds();
  else
    res.decode_seconds = timer.seconds();
  return res;
}

}  // namespace qk::transformer

// The data side of `qk pretrain-gpt`: Megatron's sample counts, its
// BlendedMegatronDatasetBuilder over GPT datasets (or the mock one), and its
// MegatronPretrainingSampler feeding GPTDataset rows into micro-batches.
#include <fmt/format.h>

#include <cmath>

#include "qk/base/error.h"
#include "qk/data/indexed_dataset.h"
#include "qk/data/mock_gpt_dataset.h"
#include "qk/recipes/gpt_pretrain.h"

namespace qk::recipes {
namespace {

using data::SplitName;

// Megatron's parse_and_normalize_split: is this split's proportion zero (the
// split matrix's None, no dataset)?
bool split_is_empty(const std::string& split, SplitName s) {
  std::vector<double> w;
  for (size_t p = 0; p < split.size();) {
    const size_t q = split.find_first_of(".0123456789", p);
    if (q == std::string::npos) break;
    size_t e = split.find_first_not_of(".0123456789", q);
    if (e == std::string::npos) e = split.size();
    w.push_back(std::strtod(split.substr(q, e - q).c_str(), nullptr));
    p = e;
  }
  w.resize(3, 0.0);
  return w[static_cast<size_t>(s)] <= 0.0;
}

data::GptDatasetOptions base_options(const MegatronArgs& a, const data::Tokenizer& tok) {
  data::GptDatasetOptions o;
  o.sequence_length = a.seq_length.value_or(0);
  o.seed = static_cast<uint32_t>(a.seed);
  o.split = a.split.value_or("969, 30, 1");
  if (a.data_cache_path) o.cache_dir = *a.data_cache_path;  // Megatron: the files go right there
  o.pad_id = tok.pad() >= 0 ? tok.pad() : -1;
  return o;
}

// One split of a blend (--data-path, or a --*-data-path of its own) as the
// builder makes it: a bare single prefix is a GPTDataset; weights (or
// several prefixes) make a BlendedDataset.
std::shared_ptr<const data::GptSamples> build_blend(const DataBlend& blend, data::GptDatasetOptions o,
                                                    GptDatasets& out) {
  if (blend.prefixes.size() == 1 && blend.weights.empty()) {
    auto ds = std::make_shared<data::IndexedDataset>(blend.prefixes[0]);
    out.owners.push_back(ds);
    return std::make_shared<data::GptDataset>(*ds, o);
  }
  if (blend.weights.empty()) return data::BlendedGptDataset::by_size(blend.prefixes, o);
  std::vector<data::BlendEntry> entries;
  for (size_t i = 0; i < blend.prefixes.size(); ++i) entries.push_back({blend.weights[i], blend.prefixes[i]});
  return std::make_shared<data::BlendedGptDataset>(entries, o);
}

std::string describe(const char* name, const data::GptSamples* s, int64_t wanted) {
  if (!s) return fmt::format("    {}: none", name);
  return fmt::format("    {}: {} samples ({} needed)", name, s->size(), wanted);
}

}  // namespace

GptSampleCounts gpt_sample_counts(const MegatronArgs& a) {
  const int64_t gbs = a.global_batch_size.value_or(0);
  GptSampleCounts c;
  c.train = a.train_samples ? *a.train_samples : a.train_iters.value_or(0) * gbs;
  const int64_t iters = a.train_iters ? *a.train_iters : (gbs > 0 ? c.train / gbs : 0);
  const int64_t eval_iters = a.eval_interval > 0 ? (iters / a.eval_interval + 1) * a.eval_iters : a.eval_iters;
  c.valid = eval_iters * gbs;
  c.test = a.eval_iters * gbs;
  return c;
}

GptDatasets build_gpt_datasets(const MegatronArgs& a, const data::Tokenizer& tok) {
  const GptSampleCounts counts = gpt_sample_counts(a);
  const int64_t wanted[3] = {counts.train, counts.valid, counts.test};
  GptDatasets out;
  std::shared_ptr<const data::GptSamples>* slots[3] = {&out.train, &out.valid, &out.test};
  const data::GptDatasetOptions base = base_options(a, tok);

  if (a.mock_data) {
    // MockGPTLowLevelDataset's tokens run up to 4094 besides eod.
    QK_CHECK(tok.vocab_size() > data::MockGptSequences::max_token_id(), "--mock-data draws token ids up to ",
             data::MockGptSequences::max_token_id(),
             " (Megatron's mock sequences are 1, 2, ..., length-1, eod) but the "
             "tokenizer has ", tok.vocab_size(), " ids; use e.g. --tokenizer-type NullTokenizer --vocab-size 4096");
    auto mock = std::make_shared<data::MockGptSequences>(tok.eod());
    out.owners.push_back(mock);
    data::GptDatasetOptions o = base;
    // BlendedMegatronDatasetConfig: mock without --split splits "1,1,1"; no index cache.
    o.split = a.split.value_or("1,1,1");
    if (!a.data_cache_path) o.cache_dir = std::string(1, '-');  // (GCC 12 misreads = "-" as an overlapping copy)
    for (int s = 0; s < 3; ++s) {
      o.split_name = static_cast<SplitName>(s);
      if (split_is_empty(o.split, o.split_name) || wanted[s] == 0) continue;
      o.num_samples = wanted[s];
      *slots[s] = std::make_shared<data::GptDataset>(*mock, o);
    }
  } else if (a.data_path) {
    const DataBlend blend = parse_data_blend(*a.data_path, "--data-path");
    for (int s = 0; s < 3; ++s) {
      data::GptDatasetOptions o = base;
      o.split_name = static_cast<SplitName>(s);
      if (split_is_empty(o.split, o.split_name) || wanted[s] == 0) continue;
      o.num_samples = wanted[s];
      *slots[s] = build_blend(blend, o, out);
    }
  } else {
    // blend_per_split: each split its own blend over the whole of its datasets.
    const std::optional<std::vector<std::string>>* paths[3] = {&a.train_data_path, &a.valid_data_path,
                                                               &a.test_data_path};
    const char* flags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    const char* whole[3] = {"1,0,0", "0,1,0", "0,0,1"};
    for (int s = 0; s < 3; ++s) {
      if (!*paths[s] || wanted[s] == 0) continue;
      data::GptDatasetOptions o = base;
      o.split = whole[s];
      o.split_name = static_cast<SplitName>(s);
      o.num_samples = wanted[s];
      *slots[s] = build_blend(parse_data_blend(**paths[s], flags[s]), o, out);
    }
  }
  QK_CHECK(out.train || counts.train == 0, "no training data: the --split proportions give the train split nothing");
  out.description = fmt::format("  datasets (sequence length {}):\n{}\n{}\n{}", base.sequence_length,
                                describe("train", out.train.get(), counts.train),
                                describe("validation", out.valid.get(), counts.valid),
                                describe("test", out.test.get(), counts.test));
  return out;
}

double GptBatch::loss_tokens() const {
  const float* m = loss_mask.data_ptr<float>();
  double s = 0;
  for (int64_t i = 0, n = loss_mask.numel(); i < n; ++i) s += m[i];
  return s;
}

GptBatchIterator::GptBatchIterator(std::shared_ptr<const data::GptSamples> samples, int64_t consumed_samples,
                                   int64_t micro_batch_size, int dp_rank, int dp_size, GptBatchOptions o,
                                   std::string split)
    : samples_(std::move(samples)),
      consumed_(consumed_samples),
      micro_(micro_batch_size),
      rank_(dp_rank),
      size_(dp_size),
      o_(o),
      split_(std::move(split)) {
  QK_CHECK(samples_ != nullptr, "GptBatchIterator: no ", split_, " dataset");
  QK_CHECK(micro_ > 0 && size_ > 0 && rank_ >= 0 && rank_ < size_, "GptBatchIterator: bad micro batch ", micro_,
           " or data-parallel rank ", rank_, " of ", size_);
  // MegatronPretrainingSampler asserts samples are left here; next() says
  // so instead, so a finished run started again gets to its final evaluation.
  QK_CHECK(consumed_ >= 0, "consumed samples must be >= 0, got ", consumed_);
}

GptBatch GptBatchIterator::next() {
  const int64_t total = static_cast<int64_t>(samples_->size());
  const int64_t step = micro_ * size_;
  // The sampler yields whole global micro-batches only (drop_last).
  QK_CHECK(consumed_ + step <= total, "the ", split_, " data ran out: ", consumed_, " of ", total,
           " samples consumed and the next micro-batch needs ", step,
           " more; the dataset was sized for --train-iters/--eval-iters, so this is a bug or a changed "
           "--global-batch-size on resume");
  std::vector<int64_t> rows;
  int64_t seq = -1;
  for (int64_t r = 0; r < micro_; ++r) {
    std::vector<int64_t> s = samples_->sample(static_cast<size_t>(consumed_ + rank_ * micro_ + r));
    if (seq < 0) seq = static_cast<int64_t>(s.size()) - 1;
    QK_CHECK(static_cast<int64_t>(s.size()) == seq + 1, "sample sizes differ within a batch");
    rows.insert(rows.end(), s.begin(), s.end());
  }
  consumed_ += step;

  GptBatch b;
  b.tokens = empty({micro_, seq}, DType::i64);
  b.labels = empty({micro_, seq}, DType::i64);
  b.loss_mask = empty({micro_, seq}, DType::f32);
  b.position_ids = empty({micro_, seq}, DType::i64);
  int64_t* tok = b.tokens.data_ptr<int64_t>();
  int64_t* lab = b.labels.data_ptr<int64_t>();
  float* mask = b.loss_mask.data_ptr<float>();
  int64_t* pos = b.position_ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < micro_; ++r) {
    const int64_t* text = rows.data() + r * (seq + 1);
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t i = r * seq + t;
      const int64_t x = text[t], y = text[t + 1];
      // GPTDataset.__getitem__: the loss skips pad labels (and eod tokens
      // with --eod-mask-loss); pad ids become 0 so the embedding can read them.
      mask[i] = (y == o_.pad || (o_.eod_mask_loss && x == o_.eod)) ? 0.0f : 1.0f;
      tok[i] = x == o_.pad ? 0 : x;
      lab[i] = y == o_.pad ? 0 : y;
      pos[i] = t;
    }
  }
  return b;
}

}  // namespace qk::recipes

// Megatron-Core GPTDataset indices (megatron/core/datasets/gpt_dataset.py and
// helpers.cpp build_sample_idx), and BlendedDataset's blending indices.
//
// Note [GPT index cache]
// Building the indices touches every sequence length and shuffles arrays as
// long as the run, so they are saved next to the dataset in
// <dir>/cache/GPTDataset_indices/<hash>-GPTDataset-<split>-{description.txt,
// document_index.npy,sample_index.npy,shuffle_index.npy}, the layout Megatron
// uses. <hash> is FNV-1a of the description (dataset path and sizes, split,
// sequence length, sample count, seed, flags), so any change of parameters or
// data builds anew; a cache whose description differs is ignored. The hash is
// not Megatron's md5 of its config JSON, so the two caches are not shared.
#include "qk/data/gpt_dataset.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "npy.h"
#include "numpy_random.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"

namespace qk::data {
namespace {

namespace fs = std::filesystem;

const char* split_str(SplitName s) {
  switch (s) {
    case SplitName::kTrain: return "train";
    case SplitName::kValid: return "valid";
    case SplitName::kTest: return "test";
  }
  return "?";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// _build_document_index: the split's sequences, once per epoch, shuffled
// (the final epoch shuffled on its own when it is separated).
std::vector<int32_t> build_document_index(int64_t begin, int64_t end, int64_t epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch) {
  auto one = [&](int64_t n_epochs) {
    std::vector<int32_t> d;
    d.reserve(static_cast<size_t>((end - begin) * n_epochs));
    for (int64_t e = 0; e < n_epochs; ++e)
      for (int64_t i = begin; i < end; ++i) d.push_back(static_cast<int32_t>(i));
    rng.shuffle(std::span<int32_t>(d));
    return d;
  };
  if (!separate_final_epoch || epochs == 1) return one(epochs);
  auto first = one(epochs - 1);
  auto last = one(1);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

// helpers.cpp build_sample_idx.
std::vector<int64_t> build_sample_index(const std::vector<int32_t>& sizes, const std::vector<int32_t>& doc_idx,
                                        int64_t seq_length, int64_t epochs, int64_t tokens_per_epoch,
                                        bool drop_last, int64_t extra) {
  int64_t num_samples;
  if (drop_last) num_samples = (epochs * tokens_per_epoch - extra) / seq_length;
  else num_samples = static_cast<int64_t>(std::ceil(static_cast<float>(epochs * tokens_per_epoch - extra) / seq_length));
  std::vector<int64_t> s(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t n = 0, di = 0, offset = 0;
  s[0] = 0;
  s[1] = 0;
  ++n;
  while (n <= num_samples) {
    int64_t remaining = seq_length + extra;
    while (remaining != 0) {
      const int64_t doc_len = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(di)])] - offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        offset += remaining + doc_len - extra;
        remaining = 0;
      } else {
        if (di == static_cast<int64_t>(doc_idx.size()) - 1) {
          QK_INTERNAL_ASSERT(n == num_samples, "sample index ran out of documents at sample ", n);
          offset = sizes[static_cast<size_t>(doc_idx[static_cast<size_t>(di)])] - extra;
          break;
        }
        ++di;
        offset = 0;
      }
    }
    s[static_cast<size_t>(2 * n)] = di;
    s[static_cast<size_t>(2 * n + 1)] = offset;
    ++n;
  }
  return s;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total, NumpyRandomState& rng) {
  std::vector<int64_t> first(static_cast<size_t>(num_samples));
  std::iota(first.begin(), first.end(), 0);
  rng.shuffle(std::span<int64_t>(first));
  if (num_samples == total) return first;
  std::vector<int64_t> last(static_cast<size_t>(total - num_samples));
  std::iota(last.begin(), last.end(), num_samples);
  rng.shuffle(std::span<int64_t>(last));
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

}  // namespace

SplitName parse_split_name(const std::string& s) {
  if (s == "train") return SplitName::kTrain;
  if (s == "valid" || s == "validation") return SplitName::kValid;
  if (s == "test") return SplitName::kTest;
  QK_THROW(ValueError, "unknown split '", s, "'; expected train, valid or test");
}

std::vector<int64_t> split_bounds(const std::string& split, int64_t n) {
  // _parse_and_normalize_split: the numbers in the string, padded to 3, normalized.
  std::vector<double> w;
  for (size_t p = 0; p < split.size();) {
    const size_t q = split.find_first_of(".0123456789", p);
    if (q == std::string::npos) break;
    size_t e = split.find_first_not_of(".0123456789", q);
    if (e == std::string::npos) e = split.size();
    char* end = nullptr;
    const std::string num = split.substr(q, e - q);
    w.push_back(std::strtod(num.c_str(), &end));
    QK_CHECK(end && *end == '\0', "split '", split, "': '", num, "' is not a number");
    p = e;
  }
  QK_CHECK(!w.empty() && w.size() <= 3, "split '", split,
           "' must have 1 to 3 weights, e.g. 969,30,1 (train, valid, test)");
  w.resize(3, 0.0);
  const double sum = w[0] + w[1] + w[2];
  QK_CHECK(sum > 0, "split '", split, "' has weights summing to 0");
  // _get_split_indices: cumulative round() (Python's, ties to even), then
  // shifted so the last bound is exactly n.
  std::vector<int64_t> b = {0};
  for (double x : w) b.push_back(b.back() + static_cast<int64_t>(std::nearbyint(x / sum * static_cast<double>(n))));
  const int64_t excess = b.back() - n;
  for (size_t i = 1; i < b.size(); ++i) b[i] -= excess;
  return b;
}

GptDataset::GptDataset(const TokenSequences& ds, const GptDatasetOptions& o) : ds_(ds), o_(o) {
  QK_CHECK(o.sequence_length > 1, "--seq-length must be > 1, got ", o.sequence_length);
  QK_CHECK(o.num_samples >= 0, "--num-samples must be >= 0 (0: one epoch), got ", o.num_samples);
  const auto b = split_bounds(o.split, static_cast<int64_t>(ds.num_sequences()));
  begin_ = b[static_cast<size_t>(o.split_name)];
  end_ = b[static_cast<size_t>(o.split_name) + 1];
  QK_CHECK(end_ > begin_, "split '", o.split, "' gives the ", split_str(o.split_name),
           " split no sequences of '", ds.prefix(), "' (", ds.num_sequences(),
           " in all); give each split of each dataset at least one sequence, or a zero weight to a split "
           "you do not want (e.g. --split 98,2,0: no test set)");
  const int64_t extra = o.add_extra_token ? 1 : 0;
  for (int64_t i = begin_; i < end_; ++i) tokens_per_epoch_ += ds.sequence_length(static_cast<size_t>(i));
  QK_CHECK(tokens_per_epoch_ > 1, "the ", split_str(o.split_name), " split has ", tokens_per_epoch_,
           " tokens; too few to sample from");
  // _get_num_epochs
  num_epochs_ = 1;
  const int64_t requested = o.num_samples * o.sequence_length + extra;
  if (o.num_samples > 0)
    for (int64_t t = tokens_per_epoch_; t < requested; t += tokens_per_epoch_) ++num_epochs_;
  if (!load_cache()) {
    build();
    save_cache();
  }
}

void GptDataset::build() {
  const int64_t extra = o_.add_extra_token ? 1 : 0;
  const auto sizes = ds_.sequence_lengths();
  bool separate = false;
  int64_t sans_final = 0;
  if (num_epochs_ > 1) {
    sans_final = ((num_epochs_ - 1) * tokens_per_epoch_ - extra) / o_.sequence_length;
    const int64_t from_final = o_.num_samples - sans_final;
    const int64_t per_epoch = (tokens_per_epoch_ - extra) / o_.sequence_length;
    QK_INTERNAL_ASSERT(from_final >= 0 && from_final <= per_epoch + 1);
    separate = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(o_.seed);
  document_index_ = build_document_index(begin_, end_, num_epochs_, rng, separate);
  const bool drop_last = o_.split_name == SplitName::kValid ? o_.drop_last_partial_validation : true;
  sample_index_ = build_sample_index(sizes, document_index_, o_.sequence_length, num_epochs_,
                                     tokens_per_epoch_, drop_last, extra);
  const int64_t n = static_cast<int64_t>(sample_index_.size() / 2) - 1;
  shuffle_index_ = build_shuffle_index(separate ? sans_final : n, n, rng);
}

std::vector<int64_t> GptDataset::sample(size_t i) const {
  QK_CHECK_INDEX(i < size(), "sample ", i, " out of range [0, ", size(), ")");
  const int64_t extra = o_.add_extra_token ? 1 : 0;
  const size_t j = static_cast<size_t>(shuffle_index_[i]);
  const int64_t beg = sample_index_[2 * j], beg_off = sample_index_[2 * j + 1];
  const int64_t end = sample_index_[2 * j + 2], end_off = sample_index_[2 * j + 3];
  std::vector<int64_t> out;
  auto doc = [&](int64_t k) { return static_cast<size_t>(document_index_[static_cast<size_t>(k)]); };
  if (beg == end) {
    out = ds_.get(doc(beg), static_cast<size_t>(beg_off), static_cast<size_t>(end_off - beg_off + extra));
  } else {
    for (int64_t k = beg; k <= end; ++k) {
      const size_t off = k > beg ? 0 : static_cast<size_t>(beg_off);
      std::optional<size_t> len;
      if (k == end) len = static_cast<size_t>(end_off + extra);
      auto part = ds_.get(doc(k), off, len);
      out.insert(out.end(), part.begin(), part.end());
    }
  }
  out.resize(static_cast<size_t>(o_.sequence_length + extra), o_.pad_id);
  return out;
}

bool GptDataset::load_cache() {
  if (o_.cache_dir == "-") return false;
  const std::string dir = o_.cache_dir.empty()
                              ? (fs::path(ds_.prefix()).parent_path() / "cache" / "GPTDataset_indices").string()
                              : o_.cache_dir;
  std::ostringstream d;
  d << "qk GPTDataset indices v1\n"
    << "dataset " << fs::absolute(ds_.prefix()).lexically_normal().string() << "\n"
    << "sequences " << ds_.num_sequences() << " tokens " << ds_.num_tokens() << "\n"
    << "split " << o_.split << " " << split_str(o_.split_name) << "\n"
    << "sequence_length " << o_.sequence_length << "\nnum_samples " << o_.num_samples << "\n"
    << "random_seed " << o_.seed << "\nadd_extra_token_to_sequence " << o_.add_extra_token << "\n"
    << "drop_last_partial_validation_sequence " << o_.drop_last_partial_validation << "\n";
  const std::string desc = d.str();
  cache_base_ = fmt::format("{}/{:016x}-GPTDataset-{}-", dir, fnv1a(desc), split_str(o_.split_name));
  const std::string pd = cache_base_ + "description.txt";
  if (!file_exists(pd) || read_file(pd) != desc) {
    cache_description_ = desc;
    return false;
  }
  try {
    std::vector<int64_t> sh;
    document_index_ = npy::load_i32(cache_base_ + "document_index.npy", &sh);
    sample_index_ = npy::load_i64(cache_base_ + "sample_index.npy", &sh);
    QK_CHECK_AS(IoError, sh.size() == 2 && sh[1] == 2, "sample index must be N x 2");
    shuffle_index_ = npy::load_i64(cache_base_ + "shuffle_index.npy", &sh);
    QK_CHECK_AS(IoError, shuffle_index_.size() + 1 == sample_index_.size() / 2, "index sizes disagree");
    for (int32_t x : document_index_) QK_CHECK_AS(IoError, x >= begin_ && x < end_, "document out of split");
    for (size_t k = 0; k < sample_index_.size(); k += 2)
      QK_CHECK_AS(IoError, sample_index_[k] >= 0 && static_cast<size_t>(sample_index_[k]) < document_index_.size(),
                  "sample index out of range");
    for (int64_t x : shuffle_index_)
      QK_CHECK_AS(IoError, x >= 0 && static_cast<size_t>(x) < shuffle_index_.size(), "shuffle index out of range");
  } catch (const Error& e) {
    QK_WARN("ignoring the damaged GPT index cache {}*: {}", cache_base_, e.message());
    cache_description_ = desc;
    return false;
  }
  from_cache_ = true;
  return true;
}

void GptDataset::save_cache() const {
  if (o_.cache_dir == "-" || cache_base_.empty()) return;
  try {
    make_dirs(fs::path(cache_base_).parent_path().string());
    npy::save_i32(cache_base_ + "document_index.npy", document_index_, {static_cast<int64_t>(document_index_.size())});
    npy::save_i64(cache_base_ + "sample_index.npy", sample_index_, {static_cast<int64_t>(sample_index_.size() / 2), 2});
    npy::save_i64(cache_base_ + "shuffle_index.npy", shuffle_index_, {static_cast<int64_t>(shuffle_index_.size())});
    // Written last: its presence marks a complete cache.
    atomic_write_file(cache_base_ + "description.txt", cache_description_);
  } catch (const Error& e) {
    QK_WARN("could not cache the GPT indices at {}*: {}", cache_base_, e.message());
  }
}

void build_blending_indices(const std::vector<double>& weights, int64_t size,
                            std::vector<int16_t>& dataset_index, std::vector<int64_t>& dataset_sample_index) {
  QK_CHECK(!weights.empty() && weights.size() < 32768, "blending needs 1..32767 datasets, got ", weights.size());
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> current(weights.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    const double x = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_err = weights[0] * x - static_cast<double>(current[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double err = weights[d] * x - static_cast<double>(current[d]);
      if (err > best_err) {
        best_err = err;
        best = d;
      }
    }
    dataset_index[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(s)] = current[best]++;
  }
}

void BlendedGptDataset::add(const std::string& prefix, const GptDatasetOptions& o) {
  indexed_.push_back(std::make_unique<IndexedDataset>(prefix));
  datasets_.push_back(std::make_unique<GptDataset>(*indexed_.back(), o));
}

void BlendedGptDataset::build(int64_t size) {
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  for (size_t i = 0; i < dataset_index_.size(); ++i) {
    const auto& d = *datasets_[static_cast<size_t>(dataset_index_[i])];
    QK_CHECK(static_cast<size_t>(dataset_sample_index_[i]) < d.size(), "blended sample ", i, " needs sample ",
             dataset_sample_index_[i], " of '", indexed_[static_cast<size_t>(dataset_index_[i])]->prefix(),
             "', which has ", d.size(), ": the blend draws up to one sample per dataset more than the weights ",
             "promise, more than Megatron's 0.5% surplus covers on a split this small; give the split more ",
             "data (a larger --split share, fewer and larger datasets) or fewer samples (--eval-iters)");
  }
}

BlendedGptDataset::BlendedGptDataset(const std::vector<BlendEntry>& entries, const GptDatasetOptions& o) {
  QK_CHECK(!entries.empty(), "blended dataset: no datasets given");
  QK_CHECK(entries.size() < 32768, "a blend holds at most 32767 datasets, got ", entries.size());
  double sum = 0;
  for (const auto& e : entries) sum += e.weight;
  QK_CHECK(sum > 0, "blend weights sum to 0");
  // Megatron's builder normalises the weights once for the sizes and
  // BlendedDataset once more for the blending (bit-identical to Megatron-LM).
  const bool normalised = std::abs(sum - 1.0) < 1e-12;
  int64_t size = 0;
  for (const auto& e : entries) {
    // _get_size_per_split_per_dataset: the samples planned from this dataset,
    // and (with the 0.5% mid-level surplus) the samples built.
    const double w = normalised ? e.weight : e.weight / sum;
    const auto target = static_cast<int64_t>(std::ceil(static_cast<double>(o.num_samples) * w));
    GptDatasetOptions oe = o;
    // A zero weight still builds a one-sample dataset, so its files are checked.
    oe.num_samples = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(target) * 1.005)));
    add(e.prefix, oe);
    weights_.push_back(w);
    size += target;
  }
  double again = 0;
  for (double w : weights_) again += w;
  for (double& w : weights_) w /= again;
  build(size);
}

std::unique_ptr<BlendedGptDataset> BlendedGptDataset::by_size(const std::vector<std::string>& prefixes,
                                                              const GptDatasetOptions& o) {
  QK_CHECK(!prefixes.empty(), "blended dataset: no datasets given");
  QK_CHECK(prefixes.size() < 32768, "a blend holds at most 32767 datasets, got ", prefixes.size());
  std::unique_ptr<BlendedGptDataset> b(new BlendedGptDataset());
  GptDatasetOptions one_epoch = o;
  one_epoch.num_samples = 0;
  double total = 0;
  for (const auto& p : prefixes) {
    b->add(p, one_epoch);
    total += static_cast<double>(b->datasets_.back()->size());
  }
  for (const auto& d : b->datasets_) b->weights_.push_back(static_cast<double>(d->size()) / total);
  b->build(std::min<int64_t>(o.num_samples, static_cast<int64_t>(total)));
  return b;
}

std::vector<int64_t> BlendedGptDataset::sample(size_t i) const {
  QK_CHECK_INDEX(i < size(), "sample ", i, " out of range [0, ", size(), ")");
  return datasets_[static_cast<size_t>(dataset_index_[i])]->sample(static_cast<size_t>(dataset_sample_index_[i]));
}

std::vector<BlendEntry> parse_data_path(const std::string& data_path) {
  std::istringstream in(data_path);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  QK_CHECK(!words.empty(), "empty data path; expected 'PREFIX' or 'W1 PREFIX1 W2 PREFIX2 ...'");
  if (words.size() == 1) return {{1.0, words[0]}};
  QK_CHECK(words.size() % 2 == 0, "data path '", data_path,
           "' must alternate weight and prefix (an even number of words), got ", words.size(), " words");
  std::vector<BlendEntry> out;
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(words[i].c_str(), &end);
    QK_CHECK(end && *end == '\0' && w >= 0 && std::isfinite(w), "data path: '", words[i],
             "' is not a weight (a non-negative number before each prefix)");
    out.push_back({w, words[i + 1]});
    sum += w;
  }
  QK_CHECK(sum > 0, "data path weights sum to 0");
  for (auto& e : out) e.weight /= sum;
  return out;
}

}  // namespace qk::data

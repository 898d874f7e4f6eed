// GPT pre-training samples: Megatron-Core's GPTDataset and BlendedDataset.
//
//   qk::data::IndexedDataset ds("data/corpus_text_document");
//   qk::data::GptDatasetOptions o;
//   o.sequence_length = 1024;  o.num_samples = 10000;  o.seed = 1234;  o.split = "969,30,1";
//   qk::data::GptDataset train(ds, o);           // split 0 = train
//   std::vector<int64_t> s = train.sample(0);    // sequence_length + 1 tokens
//
// The document index (the split's documents repeated per epoch and shuffled),
// the sample index (where each (sequence_length + 1)-token window starts:
// document-index position and offset; windows overlap by one token and cross
// document boundaries) and the shuffle index (a permutation of the samples)
// are built exactly as Megatron-Core builds them from the same parameters,
// with numpy's RandomState reproduced bit for bit, so sample k here is
// sample k there. They are cached on disk as .npy files keyed by the
// parameters (see Note [GPT index cache] in gpt_dataset.cc).
//
// As in Megatron-Core, a "document" of GPTDataset is one *sequence* of the
// indexed dataset (preprocessing without sentence splitting writes one
// sequence per document).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qk/data/indexed_dataset.h"
#include "qk/data/token_sequences.h"

namespace qk::data {

enum class SplitName : int { kTrain = 0, kValid = 1, kTest = 2 };
SplitName parse_split_name(const std::string& s);  // "train" | "valid" | "test"

// Megatron's _parse_and_normalize_split + _get_split_indices: "969,30,1" over
// n documents -> 4 bounds [0, a, b, n].
std::vector<int64_t> split_bounds(const std::string& split, int64_t num_documents);

// What a trainer draws samples from: a GptDataset or a blend of them.
class GptSamples {
 public:
  virtual ~GptSamples() = default;
  virtual size_t size() const = 0;
  // sequence_length + 1 tokens (add_extra_token) of sample i.
  virtual std::vector<int64_t> sample(size_t i) const = 0;
};

struct GptDatasetOptions {
  int64_t sequence_length = 1024;
  int64_t num_samples = 1;  // 0: one epoch (Megatron's num_samples=None)
  uint32_t seed = 1234;
  std::string split = "969,30,1";
  SplitName split_name = SplitName::kTrain;
  bool add_extra_token = true;         // windows of sequence_length + 1 tokens
  bool drop_last_partial_validation = true;
  // Where to cache the indices; empty: <dataset folder>/cache/GPTDataset_indices.
  // "-" disables the cache.
  std::string cache_dir;
  int32_t pad_id = -1;  // for a padded last sample (valid split without drop)
};

class GptDataset : public GptSamples {
 public:
  // `ds` (an IndexedDataset, MockGptSequences, ...) must outlive the dataset.
  GptDataset(const TokenSequences& ds, const GptDatasetOptions& o);

  // Samples available (>= the requested number; whole epochs are indexed).
  size_t size() const override { return shuffle_index_.size(); }
  std::vector<int64_t> sample(size_t i) const override;

  const std::vector<int32_t>& document_index() const { return document_index_; }
  // (document-index position, offset) pairs, size() + 1 of them (flattened).
  const std::vector<int64_t>& sample_index() const { return sample_index_; }
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }
  int64_t num_epochs() const { return num_epochs_; }
  bool loaded_from_cache() const { return from_cache_; }
  const std::string& cache_base() const { return cache_base_; }
  int64_t split_begin() const { return begin_; }
  int64_t split_end() const { return end_; }

 private:
  void build();
  bool load_cache();
  void save_cache() const;

  const TokenSequences& ds_;
  GptDatasetOptions o_;
  int64_t begin_ = 0, end_ = 0, num_epochs_ = 0, tokens_per_epoch_ = 0;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;
  std::vector<int64_t> shuffle_index_;
  std::string cache_base_, cache_description_;
  bool from_cache_ = false;
};

// Megatron's build_blending_indices: for each of `size` samples, the dataset
// whose share is furthest behind its weight, and that dataset's next sample.
void build_blending_indices(const std::vector<double>& weights, int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

// "0.3 path/a_text_document 0.7 path/b_text_document" (Megatron's
// DATA_PATH / --data-path; a single path without weight is allowed).
struct BlendEntry {
  double weight;
  std::string prefix;
};
std::vector<BlendEntry> parse_data_path(const std::string& data_path);

// Megatron's BlendedDataset over GPT datasets, built as Megatron-Core's
// BlendedMegatronDatasetBuilder builds one split of a blend:
//  - weighted entries (normalised): dataset d is asked for
//    ceil(ceil(num_samples * w_d) * 1.005) samples (the 0.5% mid-level
//    surplus) and the blend has sum_d ceil(num_samples * w_d) samples;
//  - unweighted prefixes (BlendedGptDataset::by_size): one epoch of each,
//    weighted by their sample counts, min(num_samples, their total) samples.
// Sample i is sample dataset_sample_index[i] of dataset dataset_index[i], the
// dataset build_blending_indices picks.
//
//   qk::data::BlendedGptDataset b(qk::data::parse_data_path("0.3 a_text_document 0.7 b_text_document"), o);
//   auto s = b.sample(0);
class BlendedGptDataset : public GptSamples {
 public:
  BlendedGptDataset(const std::vector<BlendEntry>& entries, const GptDatasetOptions& o);
  static std::unique_ptr<BlendedGptDataset> by_size(const std::vector<std::string>& prefixes,
                                                    const GptDatasetOptions& o);
  size_t size() const override { return dataset_index_.size(); }
  std::vector<int64_t> sample(size_t i) const override;
  size_t num_datasets() const { return datasets_.size(); }
  const GptDataset& dataset(size_t d) const { return *datasets_.at(d); }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  BlendedGptDataset() = default;
  void add(const std::string& prefix, const GptDatasetOptions& o);
  void build(int64_t size);
  std::vector<std::unique_ptr<IndexedDataset>> indexed_;
  std::vector<std::unique_ptr<GptDataset>> datasets_;
  std::vector<double> weights_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace qk::data

// --data-path and friends: Megatron's get_blend_from_list over the words given,
// normalised (as BlendedMegatronDatasetBuilder normalises), and each prefix's
// .bin/.idx opened and validated up front so a typo fails before training starts.
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/indexed_dataset.h"
#include "qk/recipes/megatron_args.h"

namespace qk::recipes {

namespace {

std::optional<double> as_weight(const std::string& w) {
  if (w.empty() || w.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(w.c_str(), &end);
  if (!end || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

DataBlend parse_data_blend(const std::vector<std::string>& raw, const std::string& flag) {
  // The seed's DATA_PATH is a multi-line "count path" string: its words are the list.
  std::vector<std::string> words;
  for (const auto& r : raw) {
    std::istringstream in(r);
    for (std::string w; in >> w;) words.push_back(w);
  }
  QK_CHECK(!words.empty(), flag, " was given no prefixes; give PREFIX, W1 PREFIX1 W2 PREFIX2 ..., or "
                                 "PREFIX1 PREFIX2 ...");
  DataBlend b;
  if (words.size() % 2 == 1) {
    // Megatron: an odd count is a list of prefixes. A leading number means a pair lost its prefix.
    QK_CHECK(words.size() == 1 || !as_weight(words[0]), flag, ": ", words.size(),
             " words, starting with the weight '", words[0],
             "'; weights and prefixes must pair up (W1 PREFIX1 W2 PREFIX2 ...)");
    b.prefixes = words;
    return b;
  }
  std::vector<double> w;
  size_t numbers = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    const auto v = as_weight(words[i]);
    numbers += v.has_value();
    w.push_back(v.value_or(0));
  }
  if (numbers == 0) {
    b.prefixes = words;  // prefixes only: weights come from the datasets' sizes
    return b;
  }
  for (size_t i = 0; i < words.size(); i += 2) {
    QK_CHECK(as_weight(words[i]).has_value(), flag, ": '", words[i], "' (word ", i + 1,
             ") is not a weight, but other weight positions hold numbers; give W1 PREFIX1 W2 PREFIX2 ... "
             "or prefixes only");
  }
  double sum = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    QK_CHECK(std::isfinite(w[k]) && w[k] >= 0, flag, ": the weight of '", words[2 * k + 1],
             "' must be a finite number >= 0, got '", words[2 * k], "'");
    sum += w[k];
    b.prefixes.push_back(words[2 * k + 1]);
  }
  QK_CHECK(sum > 0, flag, ": the weights sum to 0");
  for (double x : w) b.weights.push_back(x / sum);
  return b;
}

void check_data_blend_files(DataBlend& b, const std::string& flag) {
  b.num_sequences.clear();
  b.num_tokens.clear();
  for (size_t k = 0; k < b.prefixes.size(); ++k) {
    const std::string& prefix = b.prefixes[k];
    const std::string where = flag + ": dataset " + std::to_string(k + 1) + " of " +
                              std::to_string(b.prefixes.size()) + ", prefix '" + prefix + "'";
    const bool has_suffix = prefix.ends_with(".bin") || prefix.ends_with(".idx");
    for (const auto& path : {data::idx_path(prefix), data::bin_path(prefix)}) {
      QK_CHECK_AS(IoError, file_exists(path), where, ": ", path, " does not exist",
                  has_suffix ? " (give the prefix without .bin/.idx)"
                             : " (a prefix names PREFIX.bin and PREFIX.idx, as qk preprocess writes them)");
    }
    try {
      data::IndexedDataset ds(prefix);
      b.num_sequences.push_back(static_cast<int64_t>(ds.num_sequences()));
      b.num_tokens.push_back(ds.num_tokens());
    } catch (const Error& e) {
      QK_THROW(IoError, where, ": ", e.message());
    }
    const bool weighted = b.weights.empty() || b.weights[k] > 0;
    QK_CHECK(!weighted || b.num_tokens.back() > 0, where, ": the dataset holds no tokens");
  }
}

}  // namespace qk::recipes

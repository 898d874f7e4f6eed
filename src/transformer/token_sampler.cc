// TokenSampler: greedy, temperature, top-k and top-p draws from one logits
// row in O(V) expected time per token: top-k by selection (nth_element), the
// top-p boundary by a weighted quickselect; nothing sorts the vocabulary, and
// the kept ids are drawn from in whatever order selection left them.
#include <algorithm>
#include <cmath>

#include "qk/base/error.h"
#include "qk/transformer/generate.h"

namespace qk::transformer {

namespace {

// Most likely first; equal logits: lower id first (as argmax's first maximum).
struct MoreLikely {
  const float* logits;
  bool operator()(int64_t a, int64_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

float checked_max(const float* logits, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    QK_CHECK(!std::isnan(logits[i]), "TokenSampler: logit ", i, " is NaN; the model's output is broken");
    m = std::max(m, logits[i]);
  }
  QK_CHECK(m > -INFINITY, "TokenSampler: every logit is -inf; nothing can be sampled");
  return m;
}

int64_t argmax(const float* logits, int64_t n) {
  checked_max(logits, n);
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

}  // namespace

void SamplingOptions::validate() const {
  QK_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0 (0: greedy), got ", temperature);
  QK_CHECK(top_k >= 0, "top_k must be >= 0 (0: no limit), got ", top_k);
  QK_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1] (1: no limit), got ", top_p);
}

TokenSampler::TokenSampler(const SamplingOptions& o, uint64_t seed) : options_(o), generator_(seed) {
  options_.validate();
}

double TokenSampler::uniform() {
  uint32_t r[4];
  philox4x32(generator_.seed(), generator_.advance(1), r);
  // 53 random bits: a double uniform in [0, 1).
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) | (r[1] >> 11);
  return static_cast<double>(bits) * 0x1p-53;
}

double TokenSampler::keep(const float* logits, int64_t n, bool& all_ids) {
  QK_CHECK(n > 0, "TokenSampler: no logits to sample from");
  const double m = checked_max(logits, n);
  const double inv_t = 1.0 / options_.temperature;
  auto weight = [&](int64_t i) { return std::exp((static_cast<double>(logits[i]) - m) * inv_t); };
  weights_.resize(static_cast<size_t>(n));
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, n) : n;
  const bool nucleus = options_.top_p < 1;
  kept_.clear();
  all_ids = k == n && !nucleus;
  double mass = 0;
  if (all_ids) {  // no filter: weights in id order
    for (int64_t i = 0; i < n; ++i) mass += weights_[i] = weight(i);
    return mass;
  }
  order_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order_[i] = i;
  const MoreLikely more{logits};
  // order_[0, k): the top k, in no particular order; only their weights are needed.
  if (k < n) std::nth_element(order_.begin(), order_.begin() + k, order_.end(), more);
  for (int64_t j = 0; j < k; ++j) mass += weights_[order_[j]] = weight(order_[j]);
  int64_t kept = k;
  double kept_mass = mass;
  if (nucleus) {
    // Weighted quickselect for the nucleus boundary: order_[0, lo) are kept
    // (more likely than all of order_[lo, k)) with mass `before` < limit,
    // and the boundary lies in order_[lo, hi).
    const double limit = options_.top_p * mass;
    int64_t lo = 0, hi = k;
    double before = 0;
    auto at = [&](int64_t j) { return order_[static_cast<size_t>(j)]; };
    while (hi - lo > 32) {
      int64_t a = at(lo), b = at(lo + (hi - lo) / 2), c = at(hi - 1);  // median of three
      if (more(b, a)) std::swap(a, b);
      if (more(c, b)) std::swap(b, c);
      if (more(b, a)) std::swap(a, b);
      const int64_t pivot = b;
      const auto mid_it =
          std::partition(order_.begin() + lo, order_.begin() + hi, [&](int64_t id) { return more(id, pivot); });
      const int64_t mid = mid_it - order_.begin();
      double upper = 0;
      for (int64_t j = lo; j < mid; ++j) upper += weights_[at(j)];
      if (before + upper >= limit) {
        hi = mid;  // the boundary is among the more likely part
        continue;
      }
      before += upper;
      lo = mid;
      // The pivot is the most likely of what is left: next in line.
      std::iter_swap(order_.begin() + lo, std::find(order_.begin() + lo, order_.begin() + hi, pivot));
      if (before >= limit) {
        hi = lo;
        break;
      }
      before += weights_[pivot];
      ++lo;
    }
    std::sort(order_.begin() + lo, order_.begin() + hi, more);
    for (; lo < hi && before < limit; ++lo) before += weights_[at(lo)];
    kept = lo;
    kept_mass = before;
  }
  kept_.reserve(static_cast<size_t>(kept));
  for (int64_t j = 0; j < kept; ++j) kept_.emplace_back(order_[j], weights_[order_[j]]);
  return kept_mass;
}

int64_t TokenSampler::sample(const float* logits, int64_t n) {
  if (options_.greedy()) {
    QK_CHECK(n > 0, "TokenSampler: no logits to sample from");
    return argmax(logits, n);
  }
  bool all_ids = false;
  const double total = keep(logits, n, all_ids);
  double u = uniform() * total;
  if (all_ids) {
    for (int64_t i = 0; i < n; ++i) {
      u -= weights_[i];
      if (u < 0) return i;
    }
    // Rounding left u >= 0 after the last id: the last id of non-zero weight.
    for (int64_t i = n - 1; i > 0; --i)
      if (weights_[i] > 0) return i;
    return 0;
  }
  for (const auto& [id, w] : kept_) {
    u -= w;
    if (u < 0) return id;
  }
  return kept_.back().first;
}

std::vector<std::pair<int64_t, double>> TokenSampler::candidates(const float* logits, int64_t n) {
  if (options_.greedy()) {
    QK_CHECK(n > 0, "TokenSampler: no logits to sample from");
    return {{argmax(logits, n), 1.0}};
  }
  bool all_ids = false;
  const double total = keep(logits, n, all_ids);
  std::vector<std::pair<int64_t, double>> out;
  if (all_ids) {
    for (int64_t i = 0; i < n; ++i) out.emplace_back(i, weights_[i] / total);
    std::stable_sort(out.begin(), out.end(),
                     [&](const auto& a, const auto& b) { return MoreLikely{logits}(a.first, b.first); });
  } else {
    for (const auto& [id, w] : kept_) out.emplace_back(id, w / total);
    std::sort(out.begin(), out.end(),
              [&](const auto& a, const auto& b) { return MoreLikely{logits}(a.first, b.first); });
  }
  return out;
}

}  // namespace qk::transformer

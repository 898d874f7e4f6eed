// Top-k choice, Sinkhorn balancing, capacity and route counts (moe/routing.h).
#include "moe/routing.h"

#include <algorithm>
#include <cmath>

#include "qk/base/error.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"

namespace qk::transformer::moe {

namespace {

constexpr int64_t kRowGrain = 256;  // token rows per parallel chunk

// x ranks above y: larger, NaN above everything (as torch.topk).
template <typename T>
inline bool above(T x, T y) {
  return (std::isnan(x) && !std::isnan(y)) || x > y;
}

// The k best of values offered in increasing index order, best first; an
// equal value offered later ranks below (ties to the lower index). An
// insertion into k sorted slots: ~E comparisons a row for small k.
template <typename T>
class TopK {
 public:
  explicit TopK(int64_t capacity) : value_(static_cast<size_t>(capacity)), index_(static_cast<size_t>(capacity)) {}
  void reset(int64_t k) {
    k_ = k;
    size_ = 0;
  }
  void offer(T v, int64_t i) {
    if (size_ == k_ && !above(v, value_[size_ - 1])) return;
    int64_t p = size_ < k_ ? size_++ : k_ - 1;
    for (; p > 0 && above(v, value_[p - 1]); --p) {
      value_[p] = value_[p - 1];
      index_[p] = index_[p - 1];
    }
    value_[p] = v;
    index_[p] = i;
  }
  int64_t size() const { return size_; }
  T value(int64_t r) const { return value_[r]; }
  int64_t index(int64_t r) const { return index_[r]; }

 private:
  std::vector<T> value_;
  std::vector<int64_t> index_;
  int64_t k_ = 0, size_ = 0;
};

template <typename T>
void topk_rows(const T* scores, int64_t n, int64_t e, int64_t k, const float* bias, int64_t groups,
               int64_t group_topk, int64_t* out) {
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    std::vector<T> row(static_cast<size_t>(e));
    std::vector<int64_t> chosen(static_cast<size_t>(std::max<int64_t>(group_topk, 1)));
    TopK<T> best(std::max(k, groups)), in_group(k);
    for (int64_t t = lo; t < hi; ++t) {
      const T* s = scores + t * e;
      for (int64_t j = 0; j < e; ++j) row[j] = bias ? s[j] + static_cast<T>(bias[j]) : s[j];
      best.reset(k);
      if (groups <= 0) {
        for (int64_t j = 0; j < e; ++j) best.offer(row[j], j);
      } else {
        // Each group scores the sum of its top k / group_topk; the best groups'
        // experts are the candidates (offered in index order: ties stay lower-first).
        const int64_t per = e / groups, per_group_k = k / group_topk;
        best.reset(group_topk);
        for (int64_t g = 0; g < groups; ++g) {
          in_group.reset(per_group_k);
          for (int64_t j = g * per; j < (g + 1) * per; ++j) in_group.offer(row[j], j);
          T sum = 0;
          for (int64_t i = 0; i < in_group.size(); ++i) sum += in_group.value(i);
          best.offer(sum, g);
        }
        for (int64_t i = 0; i < group_topk; ++i) chosen[i] = best.index(i);
        std::sort(chosen.begin(), chosen.begin() + group_topk);
        best.reset(k);
        for (int64_t i = 0; i < group_topk; ++i)
          for (int64_t j = chosen[i] * per; j < (chosen[i] + 1) * per; ++j) best.offer(row[j], j);
      }
      for (int64_t i = 0; i < k; ++i) out[t * k + i] = best.index(i);
    }
  });
}

}  // namespace

Tensor topk_indices(const Tensor& scores, int64_t topk, const float* bias, int64_t num_groups, int64_t group_topk) {
  QK_CHECK(scores.dim() == 2, "topk_indices: scores must be [N, E], got ", shape_str(scores.shape()));
  // Chosen on the host (scores of a device come over: [N, E] is small).
  const Tensor s = ops::contiguous(scores).to(kCPU);
  const int64_t n = s.size(0), e = s.size(1);
  QK_CHECK(topk >= 1 && topk <= e, "topk_indices: k = ", topk, " must be in 1..", e);
  if (num_groups > 0)
    QK_CHECK(e % num_groups == 0 && group_topk >= 1 && group_topk <= num_groups &&
                 topk <= group_topk * (e / num_groups),
             "topk_indices: ", num_groups, " groups of ", e, " experts, ", group_topk, " kept, cannot hold k = ", topk);
  Tensor out = empty({n, topk}, DType::i64);
  int64_t* o = out.data_ptr<int64_t>();
  if (s.dtype() == DType::f64)
    topk_rows(s.data_ptr<double>(), n, e, topk, bias, num_groups, group_topk, o);
  else
    topk_rows(ops::contiguous(ops::cast(s, DType::f32)).data_ptr<float>(), n, e, topk, bias, num_groups, group_topk, o);
  return out;
}

Tensor sinkhorn_topk_indices(const Tensor& logits, int64_t topk, double tol, int max_iterations) {
  QK_CHECK(logits.dim() == 2, "sinkhorn: logits must be [N, E], got ", shape_str(logits.shape()));
  // The cost exp(logits) in f32 as Megatron's; the normalisers accumulate in f64.
  const Tensor l = ops::contiguous(ops::cast(logits, DType::f32)).to(kCPU);
  const int64_t n = l.size(0), e = l.size(1);
  const float* x = l.data_ptr<float>();
  Tensor balanced = empty({n, e}, DType::f32);
  float* cost = balanced.data_ptr<float>();
  parallel_for(0, n * e, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) cost[i] = std::exp(x[i]);
  });
  // d0 scales rows, d1 columns (Megatron's sinkhorn, eps in the same places).
  constexpr double eps = 1e-8;
  constexpr int64_t kBlock = 1024;  // column sums in fixed row blocks: the same result on any thread count
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> d0(static_cast<size_t>(n), 1.0), d1(static_cast<size_t>(e), 1.0), d1_old = d1;
  std::vector<double> partial(static_cast<size_t>(blocks * e));
  double error = 1e9;
  for (int it = 0; error > tol && it < max_iterations; ++it) {
    parallel_for(0, blocks, 1, [&](int64_t blo, int64_t bhi) {
      for (int64_t b = blo; b < bhi; ++b) {
        double* col = partial.data() + b * e;
        std::fill(col, col + e, 0.0);
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
          const float* c = cost + i * e;
          double row = 0;
          for (int64_t j = 0; j < e; ++j) row += d1[j] * c[j];
          d0[i] = (1.0 / static_cast<double>(n)) / (row + eps);
          for (int64_t j = 0; j < e; ++j) col[j] += d0[i] * c[j];
        }
      }
    });
    error = 0;
    for (int64_t j = 0; j < e; ++j) {
      double sum = 0;
      for (int64_t b = 0; b < blocks; ++b) sum += partial[b * e + j];
      d1[j] = (1.0 / static_cast<double>(e)) / (sum + eps);
      error += std::abs(d1_old[j] - d1[j]);
    }
    error /= static_cast<double>(e);
    d1_old = d1;
  }
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j < e; ++j) cost[i * e + j] = static_cast<float>(d1[j] * cost[i * e + j] * d0[i]);
  });
  return topk_indices(balanced, topk);
}

namespace {

template <typename T>
std::vector<uint8_t> capacity_keep_impl(const int64_t* idx, const T* prob, int64_t n, int64_t k, int64_t e,
                                        int64_t per_bucket, int64_t capacity, MoETokenDropPolicy policy) {
  const int64_t routes = n * k, buckets = e / per_bucket;
  std::vector<uint8_t> keep(static_cast<size_t>(routes), 1);
  // Routes grouped by bucket, in token order (a counting sort).
  std::vector<int64_t> start(static_cast<size_t>(buckets + 1), 0);
  for (int64_t r = 0; r < routes; ++r) ++start[idx[r] / per_bucket + 1];
  bool over = false;
  for (int64_t b = 0; b < buckets; ++b) {
    over |= start[b + 1] > capacity;
    start[b + 1] += start[b];
  }
  if (!over) return keep;
  std::vector<int64_t> sorted(static_cast<size_t>(routes));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < routes; ++r) sorted[fill[idx[r] / per_bucket]++] = r;
  // Earlier token, then lower expert: the tie order of both policies.
  auto earlier = [&](int64_t a, int64_t b) {
    const int64_t ta = a / k, tb = b / k;
    return ta != tb ? ta < tb : idx[a] < idx[b];
  };
  auto heavier = [&](int64_t a, int64_t b) {
    const T x = prob[a], y = prob[b];
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx != ny) return nx;
    if (!nx && x != y) return x > y;
    return earlier(a, b);
  };
  parallel_for(0, buckets, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      auto first = sorted.begin() + start[b], last = sorted.begin() + start[b + 1];
      if (last - first <= capacity) continue;
      if (policy == MoETokenDropPolicy::probs)
        std::nth_element(first, first + capacity, last, heavier);
      else
        std::nth_element(first, first + capacity, last, earlier);
      for (auto it = first + capacity; it != last; ++it) keep[*it] = 0;
    }
  });
  return keep;
}

}  // namespace

std::vector<uint8_t> capacity_keep(const Tensor& top_idx, const Tensor& top_probs, int64_t num_experts,
                                   int64_t experts_per_bucket, int64_t bucket_capacity, MoETokenDropPolicy policy) {
  QK_CHECK(top_idx.dim() == 2 && top_probs.shape() == top_idx.shape(), "capacity_keep: indices ",
           shape_str(top_idx.shape()), " and weights ", shape_str(top_probs.shape()), " must both be [N, k]");
  QK_CHECK(experts_per_bucket >= 1 && num_experts % experts_per_bucket == 0 && bucket_capacity >= 0,
           "capacity_keep: ", num_experts, " experts cannot form buckets of ", experts_per_bucket);
  const Tensor idx = ops::contiguous(top_idx).to(kCPU);
  const int64_t n = idx.size(0), k = idx.size(1);
  if (top_probs.dtype() == DType::f64)
    return capacity_keep_impl(idx.data_ptr<int64_t>(), ops::contiguous(top_probs).to(kCPU).data_ptr<double>(), n, k,
                              num_experts, experts_per_bucket, bucket_capacity, policy);
  const Tensor p = ops::contiguous(ops::cast(top_probs, DType::f32)).to(kCPU);
  return capacity_keep_impl(idx.data_ptr<int64_t>(), p.data_ptr<float>(), n, k, num_experts, experts_per_bucket,
                            bucket_capacity, policy);
}

std::vector<int64_t> count_routes(const Tensor& top_idx, int64_t num_experts, int64_t scopes, const uint8_t* keep) {
  const Tensor idx = ops::contiguous(top_idx).to(kCPU);
  const int64_t n = idx.size(0), k = idx.size(1), rows = n / scopes;
  const int64_t* x = idx.data_ptr<int64_t>();
  std::vector<int64_t> counts(static_cast<size_t>(scopes * num_experts), 0);
  for (int64_t r = 0; r < n * k; ++r)
    if (!keep || keep[r]) ++counts[(r / k) / rows * num_experts + x[r]];
  return counts;
}

std::vector<int64_t> count_tokens_per_device(const Tensor& top_idx, int64_t num_experts, int64_t num_devices,
                                             int64_t scopes) {
  const Tensor idx = ops::contiguous(top_idx).to(kCPU);
  const int64_t n = idx.size(0), k = idx.size(1), rows = n / scopes, per = num_experts / num_devices;
  const int64_t* x = idx.data_ptr<int64_t>();
  std::vector<int64_t> counts(static_cast<size_t>(scopes * num_devices), 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t d = x[t * k + i] / per;
      bool seen = false;  // count a device once per token
      for (int64_t j = 0; j < i && !seen; ++j) seen = x[t * k + j] / per == d;
      if (!seen) ++counts[t / rows * num_devices + d];
    }
  return counts;
}

Tensor routing_map_of(const Tensor& top_idx, const std::vector<uint8_t>& keep, int64_t num_experts) {
  const Tensor idx = ops::contiguous(top_idx).to(kCPU);
  const int64_t n = idx.size(0), k = idx.size(1);
  const int64_t* x = idx.data_ptr<int64_t>();
  Tensor map = zeros({n, num_experts}, DType::boolean);
  bool* m = map.data_ptr<bool>();
  parallel_for(0, n, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo * k; r < hi * k; ++r)
      if (keep[r]) m[(r / k) * num_experts + x[r]] = true;
  });
  return map;
}

Tensor keep_weights(const std::vector<uint8_t>& keep, const Shape& shape, DType dtype) {
  std::vector<float> w(keep.begin(), keep.end());
  return ops::cast(from_vector<float>(w, shape), dtype);
}

}  // namespace qk::transformer::moe

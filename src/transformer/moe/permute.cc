// Token permutation for the experts (Megatron's moe_utils.permute,
// unpermute and sort_chunks_by_idxs): tokens sorted by expert, and back,
// weighted by the routing probabilities. The fused forms are one pass each
// way over a row map built once on the host; the unfused forms are the
// composition of differentiable ops they are tested against.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "qk/autograd/functions.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"
#include "qk/transformer/moe.h"

namespace qk::transformer {

namespace {

using V = std::vector<Tensor>;

// Rows per parallel_for chunk for row-wise passes over `cols` columns.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

Tensor i64_tensor(const std::vector<int64_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())});
}

// The type sums are kept in: double for f64 data, else float.
DType accumulate_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// ---- fused permute ----

// out[r] = tokens[row_token[r]], zeros for padding rows (a byte copy: any dtype).
Tensor gather_rows(const Tensor& tokens, const TokenPermutation& p) {
  const Tensor src = ops::contiguous(tokens);
  const int64_t c = src.size(1);
  Tensor out = empty({p.num_rows(), c}, TensorOptions(src.dtype()));
  const size_t row_bytes = static_cast<size_t>(c) * src.itemsize();
  const char* s = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  parallel_for(0, p.num_rows(), row_grain(c), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = p.row_token[static_cast<size_t>(r)];
      if (n < 0)
        std::memset(o + r * row_bytes, 0, row_bytes);
      else
        std::memcpy(o + r * row_bytes, s + n * row_bytes, row_bytes);
    }
  });
  return out;
}

// out[n] = sum over n's rows r of w_r * rows[r], accumulated in the compute
// type: w_r = probs[n, e_r] (the fused unpermute), or 1 without probs (the
// adjoint of gather_rows; x * 1 is exact, so one loop serves both).
Tensor sum_rows_per_token(const Tensor& rows, const TokenPermutation& p, const Tensor* probs_acc = nullptr) {
  const Tensor x = ops::contiguous(rows);
  const int64_t c = x.size(1), e = p.num_experts;
  Tensor out = empty({p.num_tokens, c}, TensorOptions(x.dtype()));
  dispatch_floating(x.dtype(), probs_acc ? "unpermute_tokens" : "permute_tokens backward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* xp = x.data_ptr<T>();
    const A* pp = probs_acc ? probs_acc->data_ptr<A>() : nullptr;
    T* op = out.data_ptr<T>();
    parallel_for(0, p.num_tokens, row_grain(c), [&](int64_t lo, int64_t hi) {
      std::vector<A> acc(static_cast<size_t>(c));
      for (int64_t n = lo; n < hi; ++n) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t i = p.token_offsets[static_cast<size_t>(n)]; i < p.token_offsets[static_cast<size_t>(n) + 1]; ++i) {
          const int64_t r = p.token_rows[static_cast<size_t>(i)];
          const A w = pp ? pp[n * e + p.row_expert[static_cast<size_t>(r)]] : A(1);
          const T* row = xp + r * c;
          for (int64_t j = 0; j < c; ++j) acc[static_cast<size_t>(j)] += static_cast<A>(row[j]) * w;
        }
        for (int64_t j = 0; j < c; ++j) op[n * c + j] = cast_value<T>(acc[static_cast<size_t>(j)]);
      }
    });
  });
  return out;
}

// ---- fused unpermute ----

// d rows[r] = probs[n_r, e_r] * grad[n_r] (zeros for padding rows);
// d probs[n, e_r] = grad[n] . rows[r] (zeros where no route).
// rows: saved only when the probabilities need a gradient.
std::pair<Tensor, Tensor> combine_rows_backward(const Tensor& grad, const Tensor& rows, const Tensor& probs_acc,
                                                const TokenPermutation& p, bool need_rows, bool need_probs) {
  const Tensor g = ops::contiguous(grad);
  const int64_t c = g.size(1), e = p.num_experts;
  Tensor d_rows = need_rows ? empty({p.num_rows(), c}, TensorOptions(g.dtype())) : Tensor();
  Tensor d_probs =
      need_probs ? zeros({p.num_tokens, e}, TensorOptions(probs_acc.dtype()).device(probs_acc.device())) : Tensor();
  dispatch_floating(g.dtype(), "unpermute_tokens backward", [&](auto tag) {
    using T = decltype(tag);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* gp = g.data_ptr<T>();
    const T* xp = need_probs ? rows.data_ptr<T>() : nullptr;
    const A* pp = probs_acc.data_ptr<A>();
    parallel_for(0, p.num_rows(), row_grain(c), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = p.row_token[static_cast<size_t>(r)];
        if (need_rows) {
          T* d = d_rows.data_ptr<T>() + r * c;
          if (n < 0) {
            std::fill(d, d + c, T(0.0f));
          } else {
            const A w = pp[n * e + p.row_expert[static_cast<size_t>(r)]];
            for (int64_t j = 0; j < c; ++j) d[j] = cast_value<T>(static_cast<A>(gp[n * c + j]) * w);
          }
        }
        if (need_probs && n >= 0) {  // each (n, e) has one row: no two chunks write the same entry
          A dot = 0;
          for (int64_t j = 0; j < c; ++j) dot += static_cast<A>(gp[n * c + j]) * static_cast<A>(xp[r * c + j]);
          d_probs.data_ptr<A>()[n * e + p.row_expert[static_cast<size_t>(r)]] = dot;
        }
      }
    });
  });
  return {d_rows, d_probs};
}

void check_permutation(const char* op, const TokenPermutationPtr& p) {
  QK_CHECK(p != nullptr, op, ": no permutation (make one with make_token_permutation)");
}

}  // namespace

TokenPermutationPtr make_token_permutation(const Tensor& routing_map, int64_t capacity) {
  QK_CHECK(routing_map.defined() && routing_map.dim() == 2 && routing_map.dtype() == DType::boolean,
           "make_token_permutation: expected a routing map [N, E] of bools, got ",
           routing_map.defined() ? shape_str(routing_map.shape()) + " " + dtype_name(routing_map.dtype())
                                 : std::string("an undefined tensor"));
  QK_CHECK(capacity >= 0, "make_token_permutation: capacity must not be negative, got ", capacity);
  const Tensor map = ops::contiguous(routing_map).to(kCPU);  // the row map is built on the host
  const int64_t n = map.size(0), e = map.size(1);
  const bool* m = map.data_ptr<bool>();
  auto p = std::make_shared<TokenPermutation>();
  p->num_tokens = n;
  p->num_experts = e;
  p->tokens_per_expert.assign(static_cast<size_t>(e), 0);
  std::vector<int64_t> routes_of_token(static_cast<size_t>(n), 0);
  for (int64_t col = 0; col < e; ++col) {
    int64_t count = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (!m[t * e + col]) continue;
      p->row_token.push_back(t);
      p->row_expert.push_back(col);
      ++routes_of_token[static_cast<size_t>(t)];
      ++count;
    }
    if (capacity > 0) {
      QK_CHECK(count <= capacity, "make_token_permutation: expert ", col, " has ", count,
               " routes, more than its capacity ", capacity, "; the router must drop to the capacity "
               "(--moe-expert-capacity-factor) before the input is padded to it");
      for (; count < capacity; ++count) {
        p->row_token.push_back(-1);
        p->row_expert.push_back(col);
      }
    }
    p->tokens_per_expert[static_cast<size_t>(col)] = count;
  }
  p->token_offsets.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t t = 0; t < n; ++t)
    p->token_offsets[static_cast<size_t>(t) + 1] = p->token_offsets[static_cast<size_t>(t)] + routes_of_token[static_cast<size_t>(t)];
  p->token_rows.resize(static_cast<size_t>(p->token_offsets.back()));
  std::vector<int64_t> fill(p->token_offsets.begin(), p->token_offsets.end() - 1);
  for (int64_t r = 0; r < p->num_rows(); ++r) {  // rows ascending: each token's rows stay in row order
    const int64_t t = p->row_token[static_cast<size_t>(r)];
    if (t >= 0) p->token_rows[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = r;
  }
  return p;
}

Tensor permute_tokens(const Tensor& tokens, const TokenPermutationPtr& p, bool fused) {
  check_permutation("permute_tokens", p);
  QK_CHECK(tokens.dim() == 2 && tokens.size(0) == p->num_tokens, "permute_tokens: expected tokens [",
           p->num_tokens, ", C], got ", shape_str(tokens.shape()));
  // Unfused on a device: the fused loops read host memory.
  if (!fused || !tokens.device().is_cpu()) {  // index_select over the tokens and one zero row the padding rows point at
    const Device dev = tokens.device();
    std::vector<int64_t> index(p->row_token);
    bool padding = false;
    for (int64_t& i : index)
      if (i < 0) {
        i = p->num_tokens;
        padding = true;
      }
    // Without padding rows (no capacity) the tokens themselves, not a copy with a zero row appended.
    const Tensor padded =
        padding ? cat({tokens, zeros({1, tokens.size(1)}, TensorOptions(tokens.dtype()).device(dev))}, 0) : tokens;
    return index_select(padded, 0, i64_tensor(index).to(dev));
  }
  Tensor out = gather_rows(tokens, *p);
  if (autograd::needs_grad({tokens}))
    autograd::record("PermuteTokensBackward", {tokens}, {out},
                     [p](const V& g) -> V { return {sum_rows_per_token(g[0], *p)}; });
  return out;
}

Tensor unpermute_tokens(const Tensor& rows, const Tensor& probs, const TokenPermutationPtr& p, bool fused) {
  check_permutation("unpermute_tokens", p);
  QK_CHECK(rows.dim() == 2 && rows.size(0) == p->num_rows(), "unpermute_tokens: expected rows [", p->num_rows(),
           ", C] (one per permuted row), got ", shape_str(rows.shape()));
  QK_CHECK(probs.dim() == 2 && probs.size(0) == p->num_tokens && probs.size(1) == p->num_experts,
           "unpermute_tokens: expected probs [", p->num_tokens, ", ", p->num_experts, "], got ",
           shape_str(probs.shape()));
  QK_CHECK_TYPE(is_floating(rows.dtype()) && is_floating(probs.dtype()),
                "unpermute_tokens: rows and probs must be floating point");
  const int64_t n = p->num_tokens, e = p->num_experts, c = rows.size(1);
  const DType acc = accumulate_dtype(rows.dtype());
  if (!fused || !rows.device().is_cpu()) {
    // permuted probs (padding rows read an appended zero), weighted rows,
    // scatter-added into n + 1 rows (padding rows into the extra one).
    const Device dev = rows.device();
    std::vector<int64_t> prob_index(static_cast<size_t>(p->num_rows())), token_index(static_cast<size_t>(p->num_rows()));
    for (int64_t r = 0; r < p->num_rows(); ++r) {
      const int64_t t = p->row_token[static_cast<size_t>(r)];
      prob_index[static_cast<size_t>(r)] = t < 0 ? n * e : t * e + p->row_expert[static_cast<size_t>(r)];
      token_index[static_cast<size_t>(r)] = t < 0 ? n : t;
    }
    const Tensor flat_probs = cat({probs.to(acc).reshape({n * e}), zeros({1}, TensorOptions(acc).device(dev))}, 0);
    const Tensor row_probs = index_select(flat_probs, 0, i64_tensor(prob_index).to(dev));
    const Tensor weighted = rows.to(acc) * row_probs.unsqueeze(1);
    // Megatron's scatter_add with the token index expanded over the columns, as whole rows.
    const Tensor summed = index_add(zeros({n + 1, c}, TensorOptions(acc).device(dev)), 0, i64_tensor(token_index).to(dev),
                                    weighted);
    return summed.narrow(0, 0, n).to(rows.dtype());
  }
  const Tensor probs_acc = ops::contiguous(ops::cast(probs.detach(), acc));
  Tensor out = sum_rows_per_token(rows, *p, &probs_acc);
  const bool need_rows = rows.requires_grad(), need_probs = probs.requires_grad();
  if (autograd::needs_grad({rows, probs})) {
    const Tensor saved_rows = need_probs ? ops::contiguous(rows.detach()) : Tensor();
    const DType probs_dtype = probs.dtype();
    autograd::record("UnpermuteTokensBackward", {rows, probs}, {out},
                     [p, saved_rows, probs_acc, probs_dtype, need_rows, need_probs](const V& g) -> V {
                       auto [d_rows, d_probs] =
                           combine_rows_backward(g[0], saved_rows, probs_acc, *p, need_rows, need_probs);
                       if (d_probs.defined() && d_probs.dtype() != probs_dtype) d_probs = ops::cast(d_probs, probs_dtype);
                       return {d_rows, d_probs};
                     });
  }
  return out;
}

Tensor permute_row_blocks(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& order) {
  QK_CHECK(x.dim() >= 1, "permute_row_blocks: expected at least one dim");
  QK_CHECK(order.size() == sizes.size(), "permute_row_blocks: ", sizes.size(), " blocks but an order of ",
           order.size());
  std::vector<int64_t> start(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) start[i + 1] = start[i] + sizes[i];
  QK_CHECK(start.back() == x.size(0), "permute_row_blocks: the blocks have ", start.back(), " rows, x has ",
           x.size(0));
  std::vector<bool> seen(sizes.size(), false);
  for (int64_t o : order) {
    QK_CHECK(o >= 0 && o < static_cast<int64_t>(sizes.size()) && !seen[static_cast<size_t>(o)],
             "permute_row_blocks: order must be a permutation of 0..", sizes.size() - 1);
    seen[static_cast<size_t>(o)] = true;
  }
  if (!x.device().is_cpu()) {  // on a device: the blocks' views, concatenated (differentiable as they are)
    std::vector<Tensor> blocks;
    for (int64_t o : order) blocks.push_back(x.narrow(0, start[static_cast<size_t>(o)], sizes[static_cast<size_t>(o)]));
    return blocks.empty() ? x : cat(blocks, 0);
  }
  const Tensor src = ops::contiguous(x.detach());
  Tensor out = empty(src.shape(), TensorOptions(src.dtype()));
  const size_t row_bytes = static_cast<size_t>(x.size(0) > 0 ? src.numel() / x.size(0) : 0) * src.itemsize();
  std::vector<int64_t> inverse(order.size());
  int64_t at = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t b = static_cast<size_t>(order[i]);
    std::memcpy(static_cast<char*>(out.raw_data()) + at * row_bytes,
                static_cast<const char*>(src.raw_data()) + start[b] * row_bytes,
                static_cast<size_t>(sizes[b]) * row_bytes);
    at += sizes[b];
    inverse[b] = static_cast<int64_t>(i);
  }
  if (autograd::needs_grad({x})) {
    std::vector<int64_t> out_sizes(order.size());
    for (size_t i = 0; i < order.size(); ++i) out_sizes[i] = sizes[static_cast<size_t>(order[i])];
    autograd::record("PermuteRowBlocksBackward", {x}, {out}, [out_sizes, inverse](const V& g) -> V {
      NoGradGuard no_grad;
      return {permute_row_blocks(g[0], out_sizes, inverse)};
    });
  }
  return out;
}

}  // namespace qk::transformer

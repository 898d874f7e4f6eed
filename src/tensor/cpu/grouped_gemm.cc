// Grouped GEMMs: each group's product is cut into row (and, when there are
// too few, column) tiles, and the pool's threads take tiles from every group
// off one counter, so a mixture of many small experts keeps both cores busy
// where a loop of per-expert products runs each small product alone and pays
// its threading overhead once per expert.
//
// Note [Fixed bf16 shapes]: oneDNN builds (JITs) one primitive per problem
// shape, about 1 ms each here, and an expert's row count changes every step.
// bf16 tiles therefore have kBf16Rows rows, except a group's last tile,
// which is computed from a zero-padded copy of its rows rounded up to a
// multiple of kBf16Pad; the weight gradient's reduction runs in chunks of
// kBf16ChunkRows or kBf16Rows rows and a zero-padded tail likewise. The
// shapes then do not depend on the routing (at most 4 row counts), and a
// small group wastes fewer than kBf16Pad rows.
#include "cpu/grouped_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/gemm.h"
#include "cpu/onednn_matmul.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/view.h"

namespace qk::cpu {

namespace {

constexpr int64_t kRowTile = 128;        // f32/f64 rows per tile
constexpr int64_t kBf16Rows = 64;        // bf16 rows per tile (Note [Fixed bf16 shapes])
constexpr int64_t kBf16Pad = 16;         // a bf16 tail's rows are padded to a multiple of this
constexpr int64_t kBf16ChunkRows = 256;  // bf16 weight-gradient reduction chunk
constexpr int64_t kMinColTile = 64;
// Tiles per thread before the columns are split too (not measured; enough
// that one large group at the end does not leave a thread idle for long).
constexpr int64_t kTilesPerThread = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t padded_rows(int64_t rows) { return ceil_div(rows, kBf16Pad) * kBf16Pad; }

struct Tile {
  int64_t group, row0, rows, col0, cols;
};

int64_t workers() { return in_parallel_region() ? 1 : num_threads(); }

std::vector<int64_t> row_offsets(const std::vector<int64_t>& rows) {
  std::vector<int64_t> off(rows.size() + 1, 0);
  for (size_t g = 0; g < rows.size(); ++g) off[g + 1] = off[g] + rows[g];
  return off;
}

// Runs task(i) for every i in [0, n); each thread takes the next index when
// it is done with one (tiles differ in size). A lone worker runs them here,
// where each product may still use the whole pool.
template <typename F>
void run_tasks(int64_t n, F&& task) {
  const int64_t w = std::min<int64_t>(n, workers());
  if (w <= 1) {
    for (int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  std::atomic<int64_t> next{0};
  parallel_for(0, w, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) task(i);
  });
}

// Width of the column tiles of an n_cols-wide output: all of it unless the
// `tiles` other tiles leave threads without work.
int64_t column_tile(int64_t n_cols, int64_t tiles) {
  const int64_t want = kTilesPerThread * workers();
  int64_t nc = std::max<int64_t>(n_cols, 1);
  while (tiles * ceil_div(n_cols, nc) < want && nc > kMinColTile) nc = ceil_div(ceil_div(nc, 2), 16) * 16;
  return nc;
}

// Row tiles of `row_tile` rows per group, each split into column tiles.
std::vector<Tile> make_tiles(const std::vector<int64_t>& rows, int64_t row_tile, int64_t n_cols) {
  int64_t row_tiles = 0;
  for (int64_t m : rows) row_tiles += ceil_div(m, row_tile);
  const int64_t nc = column_tile(n_cols, row_tiles);
  std::vector<Tile> tiles;
  for (size_t g = 0; g < rows.size(); ++g)
    for (int64_t r = 0; r < rows[g]; r += row_tile)
      for (int64_t c = 0; c < n_cols; c += nc)
        tiles.push_back({static_cast<int64_t>(g), r, std::min(row_tile, rows[g] - r), c, std::min(nc, n_cols - c)});
  return tiles;
}

// ---- forward and input gradient: out rows of g = a_g . op(b[g]) (+ bias[g]) ----

template <typename T>
void grouped_mm_blas(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                     const std::vector<Tensor>& bias, const Tensor& out) {
  const int64_t k = a.size(1), n = out.size(1);
  const std::vector<int64_t> off = row_offsets(rows);
  const std::vector<Tile> tiles = make_tiles(rows, kRowTile, n);
  const T* ap = a.data_ptr<T>();
  T* cp = out.data_ptr<T>();
  run_tasks(static_cast<int64_t>(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const int64_t row = off[static_cast<size_t>(t.group)] + t.row0;
    T* c = cp + row * n + t.col0;
    T beta = 0;
    if (!bias.empty()) {  // C starts as the bias rows, then C += product
      const T* bp = bias[static_cast<size_t>(t.group)].data_ptr<T>() + t.col0;
      for (int64_t r = 0; r < t.rows; ++r) std::copy(bp, bp + t.cols, c + r * n);
      beta = 1;
    }
    if (k == 0) {
      if (bias.empty())
        for (int64_t r = 0; r < t.rows; ++r) std::fill(c + r * n, c + r * n + t.cols, T(0));
      return;
    }
    const T* bg = b[static_cast<size_t>(t.group)].data_ptr<T>();
    // b[g] [N, K] (trans_b: op(B) = B^T, column c0 is row c0) or [K, N].
    const T* bt = trans_b ? bg + t.col0 * k : bg + t.col0;
    gemm<T>(false, trans_b, t.rows, t.cols, k, T(1), ap + row * k, k, bt, trans_b ? k : n, beta, c, n);
  });
}

void grouped_mm_onednn_bf16(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b,
                            bool trans_b, const std::vector<Tensor>& bias, const Tensor& out) {
  const int64_t k = a.size(1), n = out.size(1);
  const std::vector<int64_t> off = row_offsets(rows);
  const std::vector<Tile> tiles = make_tiles(rows, kBf16Rows, n);
  const BFloat16* ap = a.data_ptr<BFloat16>();
  BFloat16* cp = out.data_ptr<BFloat16>();
  run_tasks(static_cast<int64_t>(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const size_t g = static_cast<size_t>(t.group);
    const int64_t row = off[g] + t.row0;
    const BFloat16* bg = b[g].data_ptr<BFloat16>();
    const BFloat16* bt = trans_b ? bg + t.col0 * k : bg + t.col0;
    const void* bias_p = bias.empty() ? nullptr : bias[g].data_ptr<BFloat16>() + t.col0;
    onednn::MatmulShape s{false, trans_b, padded_rows(t.rows), t.cols, k, DType::bf16, DType::bf16};
    s.has_bias = bias_p != nullptr;
    s.bias = DType::bf16;
    BFloat16* c = cp + row * n + t.col0;
    if (t.rows == s.m) {
      onednn::matmul(s, ap + row * k, k, bt, trans_b ? k : n, c, n, bias_p);
      return;
    }
    // The last tile of a group: a zero-padded copy of its rows (Note [Fixed bf16 shapes]).
    Tensor a_pad = zeros({s.m, k}, DType::bf16), c_pad = empty({s.m, t.cols}, DType::bf16);
    std::memcpy(a_pad.raw_data(), ap + row * k, sizeof(BFloat16) * static_cast<size_t>(t.rows * k));
    BFloat16* cpad = c_pad.data_ptr<BFloat16>();
    onednn::matmul(s, a_pad.raw_data(), k, bt, trans_b ? k : n, cpad, t.cols, bias_p);
    for (int64_t r = 0; r < t.rows; ++r) std::copy(cpad + r * t.cols, cpad + (r + 1) * t.cols, c + r * n);
  });
}

// ---- weight gradient: out[g] = a_g^T . b_g ----

// Output tiles: rows [p0, p0 + pc) of each non-empty group's [P, Q] result.
std::vector<Tile> weight_tiles(const std::vector<int64_t>& rows, int64_t p) {
  int64_t busy = 0;
  for (int64_t m : rows) busy += m > 0 ? 1 : 0;
  const int64_t pc = column_tile(p, busy);
  std::vector<Tile> tiles;
  for (size_t g = 0; g < rows.size(); ++g)
    if (rows[g] > 0)
      for (int64_t c = 0; c < p; c += pc) tiles.push_back({static_cast<int64_t>(g), 0, rows[g], c, std::min(pc, p - c)});
  return tiles;
}

template <typename T>
void grouped_mm_tn_blas(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows,
                        const std::vector<Tensor>& out) {
  const int64_t p = a.size(1), q = b.size(1);
  const std::vector<int64_t> off = row_offsets(rows);
  const std::vector<Tile> tiles = weight_tiles(rows, p);
  const T* ap = a.data_ptr<T>();
  const T* bp = b.data_ptr<T>();
  run_tasks(static_cast<int64_t>(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const int64_t row = off[static_cast<size_t>(t.group)];
    T* c = out[static_cast<size_t>(t.group)].data_ptr<T>() + t.col0 * q;
    // op(A) = A_g^T: columns [p0, p0 + pc) of the stored [m_g, P] block.
    gemm<T>(true, false, t.cols, q, t.rows, T(1), ap + row * p + t.col0, p, bp + row * q, q, T(0), c, q);
  });
}

void grouped_mm_tn_onednn_bf16(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows,
                               const std::vector<Tensor>& out) {
  const int64_t p = a.size(1), q = b.size(1);
  const std::vector<int64_t> off = row_offsets(rows);
  const BFloat16* ap = a.data_ptr<BFloat16>();
  const BFloat16* bp = b.data_ptr<BFloat16>();
  // Each group's last rows (m_g mod kBf16Rows), zero-padded (Note [Fixed bf16 shapes]).
  std::vector<Tensor> tail_a(rows.size()), tail_b(rows.size());
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t tail = rows[g] % kBf16Rows;
    if (tail == 0) continue;
    const int64_t first = off[g] + rows[g] - tail;
    tail_a[g] = zeros({padded_rows(tail), p}, DType::bf16);
    tail_b[g] = zeros({padded_rows(tail), q}, DType::bf16);
    std::memcpy(tail_a[g].raw_data(), ap + first * p, sizeof(BFloat16) * static_cast<size_t>(tail * p));
    std::memcpy(tail_b[g].raw_data(), bp + first * q, sizeof(BFloat16) * static_cast<size_t>(tail * q));
  }
  const std::vector<Tile> tiles = weight_tiles(rows, p);
  run_tasks(static_cast<int64_t>(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const size_t g = static_cast<size_t>(t.group);
    Tensor acc = empty({t.cols, q});  // f32 sums over the row chunks
    float* accp = acc.data_ptr<float>();
    bool first = true;
    auto chunk = [&](const BFloat16* a_rows, const BFloat16* b_rows, int64_t k) {
      onednn::MatmulShape s{true, false, t.cols, q, k, DType::bf16, DType::f32, !first};
      onednn::matmul(s, a_rows + t.col0, p, b_rows, q, accp, q);
      first = false;
    };
    const int64_t whole = t.rows - t.rows % kBf16Rows;
    for (int64_t r = 0; r < whole;) {
      const int64_t k = whole - r >= kBf16ChunkRows ? kBf16ChunkRows : kBf16Rows;
      chunk(ap + (off[g] + r) * p, bp + (off[g] + r) * q, k);
      r += k;
    }
    if (tail_a[g].defined()) chunk(tail_a[g].data_ptr<BFloat16>(), tail_b[g].data_ptr<BFloat16>(), tail_a[g].size(0));
    BFloat16* c = out[g].data_ptr<BFloat16>() + t.col0 * q;
    for (int64_t j = 0; j < t.cols * q; ++j) c[j] = BFloat16(accp[j]);
  });
}

std::vector<Tensor> to_f32(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(ops::cast(t, DType::f32));
  return out;
}

}  // namespace

Tensor grouped_mm(const Tensor& a, const std::vector<int64_t>& rows, const std::vector<Tensor>& b, bool trans_b,
                  const std::vector<Tensor>& bias) {
  const DType dt = a.dtype();
  const int64_t n = b.empty() ? 0 : (trans_b ? b[0].size(0) : b[0].size(1));
  Tensor out = empty({a.size(0), n}, TensorOptions(dt).device(a.device()));
  if (out.numel() == 0) return out;
  if (dt == DType::bf16 && onednn::has_bf16_matmul() && a.size(1) > 0) {
    grouped_mm_onednn_bf16(a, rows, b, trans_b, bias, out);
  } else if (is_reduced_float(dt)) {  // multiply in f32, round once
    return ops::cast(grouped_mm(ops::cast(a, DType::f32), rows, to_f32(b), trans_b, to_f32(bias)), dt);
  } else if (dt == DType::f32) {
    grouped_mm_blas<float>(a, rows, b, trans_b, bias, out);
  } else {
    grouped_mm_blas<double>(a, rows, b, trans_b, bias, out);
  }
  return out;
}

std::vector<Tensor> grouped_mm_tn(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows) {
  const DType dt = a.dtype();
  const int64_t p = a.size(1), q = b.size(1);
  if (is_reduced_float(dt) && !(dt == DType::bf16 && onednn::has_bf16_matmul())) {
    std::vector<Tensor> out = grouped_mm_tn(ops::cast(a, DType::f32), ops::cast(b, DType::f32), rows);
    for (Tensor& t : out) t = ops::cast(t, dt);
    return out;
  }
  std::vector<Tensor> out;
  out.reserve(rows.size());
  for (int64_t m : rows) out.push_back(m > 0 ? empty({p, q}, TensorOptions(dt).device(a.device()))
                                             : zeros({p, q}, TensorOptions(dt).device(a.device())));
  if (p == 0 || q == 0) return out;
  if (dt == DType::bf16)
    grouped_mm_tn_onednn_bf16(a, b, rows, out);
  else if (dt == DType::f32)
    grouped_mm_tn_blas<float>(a, b, rows, out);
  else
    grouped_mm_tn_blas<double>(a, b, rows, out);
  return out;
}

}  // namespace qk::cpu

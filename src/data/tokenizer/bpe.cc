// Byte-level BPE encoding and decoding.
//
// A piece (one pre-tokenizer match) starts as one symbol per byte; the
// adjacent pair with the lowest merge rank is merged, leftmost first on a
// tie, until no adjacent pair has a merge. This is the Hugging Face / GPT-2
// algorithm; for GPT-2 it gives the same ids as tiktoken's rank-of-bytes
// variant (checked against js-tiktoken by tokenizer_parity_test).
//
// Speed comes from three things: a flat open-addressing table for pair ->
// merge, an incremental rank array so each merge re-looks-up only the two
// neighbouring pairs, and a per-thread direct-mapped cache of short pieces
// (natural text repeats a few thousand words most of the time).
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <queue>

#include "tokenizer/unicode.h"
#include "qk/base/error.h"

namespace qk::data {

// pair (left id, right id) -> {rank, merged id}; linear probing.
class BpeTokenizer::MergeTable {
 public:
  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.resize(cap);
    mask_ = cap - 1;
  }
  // False when the pair is already present (the first rank wins).
  bool insert(int32_t a, int32_t b, Merge m) {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return false;
      if (keys_[i] == kEmpty) {
        keys_[i] = k;
        vals_[i] = m;
        return true;
      }
    }
  }
  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 29) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  size_t mask_;
};

namespace {

std::atomic<uint64_t> g_next_instance{1};

// Per-thread cache of short pieces; see the banner. 64-byte slots, 2 MiB
// (the size was not measured against others).
struct PieceCache {
  static constexpr size_t kSlots = 1 << 15;
  static constexpr size_t kMaxKey = 24, kMaxIds = 8;
  struct Slot {
    uint32_t key_len = 0;  // 0: empty
    uint32_t n_ids = 0;
    char key[kMaxKey];
    int32_t ids[kMaxIds];
  };
  uint64_t owner = 0;
  std::vector<Slot> slots;

  static uint64_t hash(const char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      h = (h ^ v) * 0xff51afd7ed558ccdull;
      h ^= h >> 32;
      p += 8;
      n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
  }
  Slot& slot_for(std::string_view piece) {
    return slots[hash(piece.data(), piece.size()) & (kSlots - 1)];
  }
};

PieceCache& cache_for(uint64_t owner) {
  thread_local PieceCache c;
  if (c.owner != owner) {
    c.slots.assign(PieceCache::kSlots, PieceCache::Slot{});
    c.owner = owner;
  }
  return c;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : pattern_(spec.pattern),
      match_added_(spec.match_added_tokens),
      ignore_merges_(spec.ignore_merges),
      prefix_ids_(std::move(spec.prefix_ids)),
      eod_(spec.eod),
      bos_(spec.bos),
      pad_(spec.pad),
      instance_id_(g_next_instance.fetch_add(1)),
      source_(std::move(spec.source)) {
  int64_t max_id = -1;
  for (const auto& [bytes, id] : spec.vocab) {
    QK_CHECK(id >= 0, source_, ": token '", bytes, "' has negative id ", id);
    max_id = std::max<int64_t>(max_id, id);
  }
  for (const auto& a : spec.added) {
    QK_CHECK(a.id >= 0, source_, ": added token '", a.content, "' has negative id ", a.id);
    QK_CHECK(!a.content.empty(), source_, ": added token ", a.id, " has empty content");
    max_id = std::max<int64_t>(max_id, a.id);
  }
  // Real vocabularies are dense; a stray huge id would allocate gigabytes.
  const int64_t n_tokens = static_cast<int64_t>(spec.vocab.size() + spec.added.size());
  QK_CHECK(max_id < 2 * n_tokens + 1024, source_, ": id ", max_id, " is far beyond the ", n_tokens,
           " tokens defined; the vocabulary ids must be (nearly) contiguous");
  id_to_bytes_.resize(static_cast<size_t>(max_id + 1));
  bytes_to_id_.reserve(spec.vocab.size() + spec.added.size());
  for (auto& [bytes, id] : spec.vocab) {
    id_to_bytes_[static_cast<size_t>(id)] = bytes;
    bytes_to_id_.emplace(std::move(bytes), id);
  }
  for (const auto& a : spec.added) {
    id_to_bytes_[static_cast<size_t>(a.id)] = a.content;
    bytes_to_id_.emplace(a.content, a.id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    QK_CHECK(it != bytes_to_id_.end(), source_, ": the vocabulary has no token for byte 0x",
             fmt::format("{:02x}", b), "; not a byte-level BPE vocabulary");
    byte_id_[b] = it->second;
  }
  merges_ = std::make_unique<MergeTable>(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    auto ia = bytes_to_id_.find(a), ib = bytes_to_id_.find(b), ic = bytes_to_id_.find(a + b);
    QK_CHECK(ia != bytes_to_id_.end() && ib != bytes_to_id_.end() && ic != bytes_to_id_.end(),
             source_, ": merge ", r, " ('", a, "' + '", b, "') refers to a token not in the vocabulary");
    merges_->insert(ia->second, ib->second, {static_cast<int32_t>(r), ic->second});
  }
  added_ = std::move(spec.added);
  std::sort(added_.begin(), added_.end(),
            [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (const auto& a : added_) added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;
}

BpeTokenizer::~BpeTokenizer() = default;

// Merges with a rank array over adjacent pairs: O(n) per merge, O(n^2) worst
// case, fastest for the short pieces that natural text is made of.
void BpeTokenizer::merge_small(std::vector<int32_t>& sym) const {
  thread_local std::vector<int64_t> rank;  // (rank << 32 | merged id), INT64_MAX: none
  const size_t n0 = sym.size();
  rank.resize(n0);
  auto pair_rank = [&](size_t i) -> int64_t {
    const Merge* m = merges_->find(sym[i], sym[i + 1]);
    return m ? (static_cast<int64_t>(m->rank) << 32 | static_cast<uint32_t>(m->id)) : INT64_MAX;
  };
  for (size_t i = 0; i + 1 < n0; ++i) rank[i] = pair_rank(i);
  size_t n = n0;
  while (n > 1) {
    size_t best = 0;
    int64_t best_r = INT64_MAX;
    for (size_t i = 0; i + 1 < n; ++i)
      if (rank[i] < best_r) { best_r = rank[i]; best = i; }
    if (best_r == INT64_MAX) break;
    sym[best] = static_cast<int32_t>(best_r & 0xffffffff);
    sym.erase(sym.begin() + static_cast<ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<ptrdiff_t>(best) + 1);
    --n;
    if (best + 1 < n) rank[best] = pair_rank(best);
    if (best > 0) rank[best - 1] = pair_rank(best - 1);
  }
}

// Heap over candidate merges and a linked list of symbols: O(n log n) for
// the long pieces (base64 blobs, long digit or punctuation runs).
void BpeTokenizer::merge_large(std::vector<int32_t>& sym) const {
  const int32_t n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = merges_->find(sym[i], sym[next[i]]))
      heap.push({m->rank, i, sym[i], sym[next[i]], m->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    // Stale when either side changed since the candidate was pushed.
    if (!alive[c.pos] || sym[c.pos] != c.left || next[c.pos] < 0 || sym[next[c.pos]] != c.right)
      continue;
    const int32_t r = next[c.pos];
    sym[c.pos] = c.merged;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) sym[w++] = sym[i];
  sym.resize(w);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(piece));
    if (it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  sym.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  if (sym.size() <= 128) merge_small(sym);
  else merge_large(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<std::pair<size_t, size_t>> pieces;
  pieces.clear();
  split_pieces(pattern_, text, pieces);
  PieceCache& cache = cache_for(instance_id_);
  for (const auto& [off, len] : pieces) {
    std::string_view piece = text.substr(off, len);
    if (len > PieceCache::kMaxKey) {
      encode_piece(piece, out);
      continue;
    }
    PieceCache::Slot& s = cache.slot_for(piece);
    if (s.key_len == len && std::memcmp(s.key, piece.data(), len) == 0) {
      out.insert(out.end(), s.ids, s.ids + s.n_ids);
      continue;
    }
    const size_t before = out.size();
    encode_piece(piece, out);
    const size_t n = out.size() - before;
    if (n <= PieceCache::kMaxIds) {
      s.key_len = static_cast<uint32_t>(len);
      std::memcpy(s.key, piece.data(), len);
      s.n_ids = static_cast<uint32_t>(n);
      std::memcpy(s.ids, out.data() + before, n * sizeof(int32_t));
    }
  }
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  if (!match_added_ || added_.empty()) {
    encode_ordinary(text, out);
    return;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) continue;
    for (const auto& a : added_) {  // longest first
      if (text.compare(i, a.content.size(), a.content) == 0) {
        encode_ordinary(text.substr(start, i - start), out);
        out.push_back(a.id);
        i += a.content.size() - 1;
        start = i + 1;
        break;
      }
    }
  }
  encode_ordinary(text.substr(start), out);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    QK_CHECK_INDEX(id >= 0 && static_cast<size_t>(id) < id_to_bytes_.size(), "token id ", id,
                   " is outside the vocabulary [0, ", id_to_bytes_.size(), ")");
    out += id_to_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

int32_t BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = bytes_to_id_.find(std::string(token));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

std::string BpeTokenizer::describe() const {
  return fmt::format("byte-level BPE from {}: {} ids, {} split, eod {}", source_, vocab_size(),
                     split_pattern_name(pattern_), eod_);
}

}  // namespace qk::data

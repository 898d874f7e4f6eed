// Megatron-Core indexed dataset: builder and validating mmap reader.
//
// Note [Megatron idx format]
// Megatron-Core (megatron/core/datasets/indexed_dataset.py, _IndexWriter) writes:
//   offset 0   9 bytes  magic "MMIDIDX\0\0"
//   offset 9   u64      version, 1
//   offset 17  u8       dtype code (DType)
//   offset 18  u64      S, the number of sequences
//   offset 26  u64      D, the number of document-index entries (documents + 1)
//   offset 34  int32    sequence lengths [S]
//              int64    sequence pointers [S]: byte offset of each sequence in .bin
//              int64    document indices [D]: 0, then the end sequence of each document
// The arrays are packed without alignment padding (the lengths start at byte 34),
// so every load here goes through memcpy. The pointers are the running sum of
// length * itemsize, which the reader checks rather than trusts.
#include "qk/data/indexed_dataset.h"

#include <cstring>
#include <limits>

#include "qk/base/error.h"

namespace qk::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 34;
constexpr size_t kBufBytes = 1 << 20;  // write buffer of the builder; not measured

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void put(std::vector<char>& out, T v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// Converts a token to the file dtype; out-of-range ids are a caller error
// (numpy would silently wrap them; a wrapped id is a corrupt dataset).
template <typename Out, typename In>
Out narrow_token(In v) {
  if constexpr (std::is_floating_point_v<Out>) {
    return static_cast<Out>(v);
  } else {
    QK_CHECK(v >= static_cast<In>(std::numeric_limits<Out>::min()) &&
                 static_cast<int64_t>(v) <= static_cast<int64_t>(std::numeric_limits<Out>::max()),
             "token id ", v, " does not fit the dataset dtype (range ",
             static_cast<int64_t>(std::numeric_limits<Out>::min()), "..",
             static_cast<int64_t>(std::numeric_limits<Out>::max()),
             "); use a wider dtype (int32 for vocabularies of 65500 or more)");
    return static_cast<Out>(v);
  }
}

template <typename Out, typename In>
void encode_tokens(std::span<const In> in, std::vector<char>& buf) {
  size_t at = buf.size();
  buf.resize(at + in.size() * sizeof(Out));
  char* dst = buf.data() + at;
  for (size_t i = 0; i < in.size(); ++i) {
    Out v = narrow_token<Out>(in[i]);
    std::memcpy(dst + i * sizeof(Out), &v, sizeof(Out));
  }
}

template <typename T>
int64_t widen(const std::byte* p) {
  return static_cast<int64_t>(load<T>(p));
}

}  // namespace

bool dtype_valid(uint8_t code) { return code >= 1 && code <= 8; }

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kUint8: case DType::kInt8: return 1;
    case DType::kInt16: case DType::kUint16: return 2;
    case DType::kInt32: case DType::kFloat32: return 4;
    case DType::kInt64: case DType::kFloat64: return 8;
  }
  QK_THROW(ValueError, "unknown dataset dtype code ", static_cast<int>(t), " (valid: 1..8)");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kUint8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat64: return "float64";
    case DType::kFloat32: return "float32";
    case DType::kUint16: return "uint16";
  }
  return "invalid";
}

DType optimal_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? DType::kUint16 : DType::kInt32;
}

std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }
std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }

// ---------------------------------------------------------------------------
// Builder

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& path, DType dtype) : dtype_(dtype) {
  QK_CHECK(dtype_valid(static_cast<uint8_t>(dtype)), "invalid dataset dtype code ",
           static_cast<int>(dtype));
  bin_ = std::make_unique<AtomicFileWriter>(path);
  buf_.reserve(kBufBytes + 4096);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() = default;

template <typename T>
void IndexedDatasetBuilder::append_tokens(std::span<const T> tokens) {
  QK_CHECK(!finalized_, "IndexedDatasetBuilder: add after finalize");
  // Chunked so a very long sequence never doubles the buffer.
  constexpr size_t kChunk = 1 << 16;
  for (size_t at = 0; at < tokens.size(); at += kChunk) {
    auto part = tokens.subspan(at, std::min(kChunk, tokens.size() - at));
    switch (dtype_) {
      case DType::kUint8: encode_tokens<uint8_t>(part, buf_); break;
      case DType::kInt8: encode_tokens<int8_t>(part, buf_); break;
      case DType::kInt16: encode_tokens<int16_t>(part, buf_); break;
      case DType::kUint16: encode_tokens<uint16_t>(part, buf_); break;
      case DType::kInt32: encode_tokens<int32_t>(part, buf_); break;
      case DType::kInt64: encode_tokens<int64_t>(part, buf_); break;
      case DType::kFloat32: encode_tokens<float>(part, buf_); break;
      case DType::kFloat64: encode_tokens<double>(part, buf_); break;
    }
    if (buf_.size() >= kBufBytes) flush();
  }
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::flush() {
  if (!buf_.empty()) bin_->write(buf_.data(), buf_.size());
  buf_.clear();
}

void IndexedDatasetBuilder::add_item(std::span<const int64_t> tokens) {
  QK_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
           "sequence of ", tokens.size(), " tokens exceeds the int32 length field");
  append_tokens(tokens);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  QK_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
           "sequence of ", tokens.size(), " tokens exceeds the int32 length field");
  append_tokens(tokens);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  QK_CHECK(!finalized_, "IndexedDatasetBuilder: end_document after finalize");
  doc_indices_.push_back(static_cast<int64_t>(lengths_.size()));
}

template <typename T>
static void check_lengths(std::span<const T> tokens, std::span<const int32_t> lengths) {
  int64_t sum = 0;
  for (int32_t l : lengths) {
    QK_CHECK(l >= 0, "add_document: negative sentence length ", l);
    sum += l;
  }
  QK_CHECK(sum == static_cast<int64_t>(tokens.size()), "add_document: sentence lengths sum to ",
           sum, " but the document has ", tokens.size(), " tokens");
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens,
                                         std::span<const int32_t> lengths) {
  check_lengths(tokens, lengths);
  append_tokens(tokens);
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  end_document();
}

void IndexedDatasetBuilder::add_document(std::span<const int64_t> tokens,
                                         std::span<const int32_t> lengths) {
  check_lengths(tokens, lengths);
  append_tokens(tokens);
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  end_document();
}

void IndexedDatasetBuilder::finalize(const std::string& idx) {
  QK_CHECK(!finalized_, "IndexedDatasetBuilder: finalize called twice");
  flush();
  bin_->commit();
  finalized_ = true;

  std::vector<char> out;
  out.reserve(kHeaderBytes + lengths_.size() * 12 + doc_indices_.size() * 8);
  out.insert(out.end(), kMagic, kMagic + sizeof kMagic);
  put<uint64_t>(out, 1);
  put<uint8_t>(out, static_cast<uint8_t>(dtype_));
  put<uint64_t>(out, lengths_.size());
  put<uint64_t>(out, doc_indices_.size());
  for (int32_t l : lengths_) put<int32_t>(out, l);
  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  int64_t ptr = 0;
  for (int32_t l : lengths_) {
    put<int64_t>(out, ptr);
    ptr += l * item;
  }
  for (int64_t d : doc_indices_) put<int64_t>(out, d);
  atomic_write_file(idx, std::string_view(out.data(), out.size()));
}

// ---------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string ip = idx_path(prefix), bp = bin_path(prefix);
  QK_CHECK_AS(IoError, file_exists(ip), "index file '", ip,
              "' not found; pass the dataset prefix without .idx/.bin (e.g. out_text_document)");
  QK_CHECK_AS(IoError, file_exists(bp), "data file '", bp, "' not found (the .idx exists)");
  idx_ = MappedFile(ip);
  bin_ = MappedFile(bp);
  const std::byte* p = idx_.data();
  const size_t n = idx_.size();
  QK_CHECK_AS(IoError, n >= kHeaderBytes, "'", ip, "' is truncated: ", n,
              " bytes, shorter than the 34-byte header");
  QK_CHECK_AS(IoError, std::memcmp(p, kMagic, sizeof kMagic) == 0, "'", ip,
              "' is not a Megatron indexed dataset: bad magic (expected \"MMIDIDX\\0\\0\")");
  const uint64_t version = load<uint64_t>(p + 9);
  QK_CHECK_AS(IoError, version == 1, "'", ip, "' has index version ", version,
              "; only version 1 is supported");
  const uint8_t code = load<uint8_t>(p + 17);
  QK_CHECK_AS(IoError, dtype_valid(code), "'", ip, "' has unknown dtype code ",
              static_cast<int>(code), " (valid: 1..8)");
  dtype_ = static_cast<DType>(code);
  const uint64_t S = load<uint64_t>(p + 18);
  const uint64_t D = load<uint64_t>(p + 26);
  // Sizes checked before multiplying so a huge count cannot overflow.
  const uint64_t max_entries = n / 4;
  QK_CHECK_AS(IoError, S <= max_entries && D <= max_entries && D >= 1, "'", ip,
              "' header claims ", S, " sequences and ", D,
              " document-index entries, impossible for a ", n,
              "-byte file; the index is truncated or corrupt");
  const uint64_t want = kHeaderBytes + S * 4 + S * 8 + D * 8;
  QK_CHECK_AS(IoError, n == want, "'", ip, "' has ", n, " bytes but its header (", S,
              " sequences, ", D, " document-index entries) needs ", want,
              (n < want ? "; the file is truncated" : "; trailing bytes"));
  num_sequences_ = S;
  num_doc_indices_ = D;
  lengths_ = p + kHeaderBytes;
  pointers_ = lengths_ + S * 4;
  doc_idx_ = pointers_ + S * 8;

  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_.size());
  int64_t expect_ptr = 0;
  for (size_t i = 0; i < S; ++i) {
    const int32_t len = sequence_length(i);
    const int64_t ptr = sequence_pointer(i);
    QK_CHECK_AS(IoError, len >= 0, "'", ip, "': sequence ", i, " has negative length ", len);
    QK_CHECK_AS(IoError, ptr == expect_ptr, "'", ip, "': sequence ", i, " points at byte ", ptr,
                ", expected ", expect_ptr, " (pointers must be the running sum of lengths)");
    expect_ptr += len * item;
    QK_CHECK_AS(IoError, expect_ptr <= bin_size, "'", ip, "': sequence ", i, " ends at byte ",
                expect_ptr, " past the end of '", bp, "' (", bin_size, " bytes); truncated .bin?");
    num_tokens_ += len;
  }
  QK_CHECK_AS(IoError, expect_ptr == bin_size, "'", bp, "' has ", bin_size,
              " bytes but the index describes ", expect_ptr, "; the files do not belong together");
  int64_t prev = 0;
  for (size_t k = 0; k < D; ++k) {
    const int64_t d = document_index(k);
    QK_CHECK_AS(IoError, (k == 0 ? d == 0 : d >= prev) && d <= static_cast<int64_t>(S), "'", ip,
                "': document index ", k, " is ", d, "; entries must start at 0, never decrease ",
                "and stay <= the sequence count ", S);
    prev = d;
  }
}

int32_t IndexedDataset::sequence_length(size_t i) const {
  QK_CHECK_INDEX(i < num_sequences_, "sequence ", i, " out of range [0, ", num_sequences_, ")");
  return load<int32_t>(lengths_ + i * 4);
}

int64_t IndexedDataset::sequence_pointer(size_t i) const {
  QK_CHECK_INDEX(i < num_sequences_, "sequence ", i, " out of range [0, ", num_sequences_, ")");
  return load<int64_t>(pointers_ + i * 8);
}

int64_t IndexedDataset::document_index(size_t k) const {
  QK_CHECK_INDEX(k < num_doc_indices_, "document index ", k, " out of range [0, ",
                 num_doc_indices_, ")");
  return load<int64_t>(doc_idx_ + k * 8);
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> v(num_sequences_);
  if (!v.empty()) std::memcpy(v.data(), lengths_, v.size() * 4);
  return v;
}

std::vector<int64_t> IndexedDataset::sequence_pointers() const {
  std::vector<int64_t> v(num_sequences_);
  if (!v.empty()) std::memcpy(v.data(), pointers_, v.size() * 8);
  return v;
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> v(num_doc_indices_);
  if (!v.empty()) std::memcpy(v.data(), doc_idx_, v.size() * 8);
  return v;
}

std::span<const std::byte> IndexedDataset::raw(size_t i) const {
  const size_t len = static_cast<size_t>(sequence_length(i));
  return {bin_.data() + sequence_pointer(i), len * dtype_size(dtype_)};
}

namespace {
// A float token widened like numpy's astype(int64) (toward zero); NaN, the
// infinities and values outside int64 would be undefined behaviour to convert
// (found by fuzz/idx_fuzz.cc), so they are a corrupt-file error instead.
int64_t float_token(double v, const std::string& prefix, size_t i, size_t j) {
  QK_CHECK_AS(IoError, v >= -9223372036854775808.0 && v < 9223372036854775808.0, "'", bin_path(prefix),
              "': sequence ", i, " token ", j, " is ", v, ", not a token id (a float dataset must hold ",
              "finite values within int64); the file is corrupt");
  return static_cast<int64_t>(v);
}
}  // namespace

std::vector<int64_t> IndexedDataset::get(size_t i, size_t offset,
                                         std::optional<size_t> length) const {
  const size_t len = static_cast<size_t>(sequence_length(i));
  QK_CHECK_INDEX(offset <= len, "offset ", offset, " past the end of sequence ", i, " (length ",
                 len, ")");
  const size_t n = length ? *length : len - offset;
  QK_CHECK_INDEX(n <= len - offset, "get(", i, ", ", offset, ", ", n,
                 ") reads past the end of the sequence (length ", len, ")");
  const size_t item = dtype_size(dtype_);
  const std::byte* src = bin_.data() + sequence_pointer(i) + offset * item;
  std::vector<int64_t> out(n);
  for (size_t j = 0; j < n; ++j) {
    const std::byte* q = src + j * item;
    switch (dtype_) {
      case DType::kUint8: out[j] = widen<uint8_t>(q); break;
      case DType::kInt8: out[j] = widen<int8_t>(q); break;
      case DType::kInt16: out[j] = widen<int16_t>(q); break;
      case DType::kUint16: out[j] = widen<uint16_t>(q); break;
      case DType::kInt32: out[j] = widen<int32_t>(q); break;
      case DType::kInt64: out[j] = widen<int64_t>(q); break;
      case DType::kFloat32: out[j] = float_token(load<float>(q), prefix_, i, offset + j); break;
      case DType::kFloat64: out[j] = float_token(load<double>(q), prefix_, i, offset + j); break;
    }
  }
  return out;
}

std::vector<int64_t> IndexedDataset::document(size_t k) const {
  QK_CHECK_INDEX(k + 1 < num_doc_indices_, "document ", k, " out of range [0, ",
                 num_documents(), ")");
  std::vector<int64_t> out;
  for (int64_t s = document_index(k); s < document_index(k + 1); ++s) {
    auto part = get(static_cast<size_t>(s));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace qk::data

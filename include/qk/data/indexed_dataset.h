// Megatron-Core's indexed dataset: token sequences in `PREFIX.bin`, their
// lengths, byte offsets and document boundaries in `PREFIX.idx`.
//
//   qk::data::IndexedDatasetBuilder b("out_text_document.bin", qk::data::DType::kUint16);
//   b.add_document(ids, {7, 12});           // two sentences, one document
//   b.finalize("out_text_document.idx");
//
//   qk::data::IndexedDataset ds("out_text_document");  // mmaps both files
//   auto tokens = ds.get(1);                            // sequence 1 as int64
//   auto doc = ds.document(0);                          // document 0, sentences joined
//
// Format (little-endian, see Note [Megatron idx format] in indexed_dataset.cc):
//   .idx: "MMIDIDX\0\0", u64 version=1, u8 dtype code, u64 sequence count S,
//         u64 document-index count D (= documents + 1), int32 lengths[S],
//         int64 byte pointers[S], int64 document indices[D]
//   .bin: every sequence's tokens back to back in the header's dtype.
// Files written here are byte-identical to Megatron's IndexedDatasetBuilder's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qk/base/file_io.h"
#include "qk/data/token_sequences.h"

namespace qk::data {

// Megatron's DType codes (megatron/core/datasets/indexed_dataset.py).
enum class DType : uint8_t {
  kUint8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat64 = 6, kFloat32 = 7, kUint16 = 8,
};

// Bytes per element; throws ValueError for an unknown code.
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Megatron's DType.optimal_dtype: uint16 when vocab_size < 65500, else int32.
DType optimal_dtype(int64_t vocab_size);
bool dtype_valid(uint8_t code);

std::string bin_path(const std::string& prefix);  // prefix + ".bin"
std::string idx_path(const std::string& prefix);  // prefix + ".idx"

// Streams tokens to `.bin` (published atomically by finalize) and keeps the
// per-sequence lengths in memory (4 bytes per sequence) for the `.idx`.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& bin_path, DType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence, not closing a document (Megatron's add_item).
  void add_item(std::span<const int64_t> tokens);
  void add_item(std::span<const int32_t> tokens);
  // Closes the current document (Megatron's end_document).
  void end_document();
  // A whole document: tokens of all sentences, and each sentence's length
  // (their sum must equal tokens.size()). An empty document is allowed.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths);
  void add_document(std::span<const int64_t> tokens, std::span<const int32_t> lengths);
  // Writes the `.idx` and publishes both files. The builder is done after this.
  void finalize(const std::string& idx_path);

  DType dtype() const { return dtype_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_indices_.size()) - 1; }

 private:
  template <typename T>
  void append_tokens(std::span<const T> tokens);
  void flush();

  DType dtype_;
  std::unique_ptr<AtomicFileWriter> bin_;
  std::vector<char> buf_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  int64_t num_tokens_ = 0;
  bool finalized_ = false;
};

// Read-only, memory-mapped, validated on open: a bad file raises IoError
// naming the file and what is wrong, never a crash later.
class IndexedDataset : public TokenSequences {
 public:
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const override { return prefix_; }
  DType dtype() const { return dtype_; }
  size_t num_sequences() const override { return num_sequences_; }
  // Documents = document-index entries - 1.
  size_t num_documents() const { return num_doc_indices_ - 1; }
  int64_t num_tokens() const override { return num_tokens_; }

  int32_t sequence_length(size_t i) const override;
  int64_t sequence_pointer(size_t i) const;
  // Entry k is the first sequence of document k; entry num_documents() is the end.
  int64_t document_index(size_t k) const;
  std::vector<int32_t> sequence_lengths() const override;
  std::vector<int64_t> sequence_pointers() const;
  std::vector<int64_t> document_indices() const;

  // Tokens of sequence i from `offset`, `length` of them (all the rest when
  // absent), widened to int64 (Megatron's get(idx, offset, length)).
  std::vector<int64_t> get(size_t i, size_t offset = 0,
                           std::optional<size_t> length = std::nullopt) const override;
  // All sequences of document k, concatenated.
  std::vector<int64_t> document(size_t k) const;
  // The raw bytes of sequence i in the file's dtype.
  std::span<const std::byte> raw(size_t i) const;

 private:
  std::string prefix_;
  MappedFile idx_, bin_;
  DType dtype_ = DType::kUint16;
  size_t num_sequences_ = 0, num_doc_indices_ = 0;
  int64_t num_tokens_ = 0;
  const std::byte* lengths_ = nullptr;   // int32[S], maybe unaligned
  const std::byte* pointers_ = nullptr;  // int64[S]
  const std::byte* doc_idx_ = nullptr;   // int64[D]
};

}  // namespace qk::data

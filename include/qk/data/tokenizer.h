// Tokenizers: byte-level BPE (GPT-2, Llama-3 and other Hugging Face
// `tokenizer.json` files, or GPT-2's vocab.json + merges.txt) and
// SentencePiece models, behind one interface that preprocessing and training
// share.
//
//   auto tok = qk::data::load_tokenizer({.type = "GPT2BPETokenizer",
//                                        .vocab_file = "vocab.json",
//                                        .merge_file = "merges.txt"});
//   std::vector<int32_t> ids = tok->encode("Hello world");   // {15496, 995}
//   std::string text = tok->decode(ids);                      // "Hello world"
//   int32_t eod = tok->eod();                                 // 50256
//
// encode() is const and thread-safe: each thread keeps its own cache of
// recently seen words, so several workers may share one tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qk::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> out;
    encode(text, out);
    return out;
  }
  // The bytes the ids stand for (may end inside a UTF-8 sequence when the ids
  // were cut mid-character). Throws IndexError on an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // Number of ids (largest id + 1), before any padding.
  virtual int64_t vocab_size() const = 0;
  // End-of-document, beginning-of-sequence and padding ids; -1 when absent.
  virtual int32_t eod() const = 0;
  virtual int32_t bos() const { return -1; }
  virtual int32_t pad() const { return -1; }
  // The id of a token given as its text, -1 if unknown.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  // Short description, e.g. "byte-level BPE, 50257 ids, GPT-2 split".
  virtual std::string describe() const = 0;
};

// Megatron's --tokenizer-type and the files each type needs.
struct TokenizerOptions {
  // "HuggingFaceTokenizer" (tokenizer.json, or a folder holding one),
  // "GPT2BPETokenizer" (vocab_file + merge_file), "SentencePieceTokenizer"
  // (model = an spm .model file; needs a build with libsentencepiece),
  // "NullTokenizer" (vocab_size ids plus end-of-document, for pre-tokenised text).
  // Empty: the files say which (see infer_tokenizer_type).
  std::string type = {};
  std::string model = {};       // --tokenizer-model
  std::string vocab_file = {};  // --vocab-file
  std::string merge_file = {};  // --merge-file
  int64_t vocab_size = 0;       // --vocab-size (NullTokenizer)
};

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerOptions& o);

// The type the files name when o.type is empty: vocab_file and merge_file
// alone are GPT-2's; a model that is a folder or JSON is a Hugging Face
// tokenizer.json, any other model file a SentencePiece model. Throws
// ValueError when the files are missing or say two things at once.
std::string infer_tokenizer_type(const TokenizerOptions& o);

// Megatron's NullTokenizer: text is token ids separated by spaces; ids
// 0..vocab_size-1 plus end-of-document = vocab_size (vocab_size() is V + 1).
std::unique_ptr<Tokenizer> make_null_tokenizer(int64_t vocab_size);

// Megatron's _vocab_size_with_padding: the smallest multiple of
// divisible_by * tensor_parallel_size that is >= vocab_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size = 1);

}  // namespace qk::data

// Megatron's SentencePieceTokenizer over Debian's libsentencepiece.
//
// Note [Megatron SentencePiece ids]: Megatron-LM's _SentencePieceTokenizer
// (megatron/training/tokenizer/tokenizer.py) keeps the model's pieces as ids
// 0..N-1 and then "adds" special tokens in this order, each getting the next
// free id only when it is not already a piece:
//   <CLS>, <SEP>, <EOD>, <MASK>,
//   the model's pad piece (or <PAD> when pad_id is disabled),
//   the model's bos piece (or <BOS>), the model's eos piece (or <EOS>).
// eod is <EOD>'s id (not </s>), pad/bos the ids above, and vocab_size counts
// the added ids. Its tokenize() cuts the text at every occurrence of any of
// these tokens (earliest first; a tie goes to the earlier token in that
// order), encodes the pieces between them with the model and emits the
// special ids; detokenize() writes each special token surrounded by spaces.
// We do the same, so ids and .bin files equal Megatron's.
#include "tokenizer/sentencepiece.h"

#include <fmt/format.h>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

#if QK_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>

#include <unordered_map>

namespace qk::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    QK_CHECK_AS(IoError, file_exists(path), "SentencePiece model '", path, "' not found");
    const auto status = sp_.Load(path);
    QK_CHECK_AS(IoError, status.ok(), "cannot load SentencePiece model '", path, "': ", status.ToString(),
                "; pass the .model file spm_train wrote");
    pieces_ = sp_.GetPieceSize();
    next_id_ = pieces_;
    auto piece_or = [&](int id, const char* fallback) {
      return id >= 0 && id < pieces_ ? sp_.IdToPiece(id) : std::string(fallback);
    };
    add_special("<CLS>");
    add_special("<SEP>");
    eod_ = add_special("<EOD>");
    add_special("<MASK>");
    pad_ = add_special(piece_or(sp_.pad_id(), "<PAD>"));
    bos_ = add_special(piece_or(sp_.bos_id(), "<BOS>"));
    add_special(piece_or(sp_.eos_id(), "<EOS>"));
  }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    // next[k]: where special_[k] next occurs at or after `pos` (npos: never).
    std::vector<size_t> next(special_.size());
    for (size_t k = 0; k < special_.size(); ++k) next[k] = text.find(special_[k].text);
    std::vector<int> ids;
    size_t pos = 0;
    for (;;) {
      size_t best = std::string_view::npos, which = 0;
      for (size_t k = 0; k < special_.size(); ++k) {
        if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(special_[k].text, pos);
        if (next[k] < best) best = next[k], which = k;
      }
      if (best == std::string_view::npos) break;
      encode_plain(text.substr(pos, best - pos), ids, out);
      out.push_back(special_[which].id);
      pos = best + special_[which].text.size();
    }
    encode_plain(text.substr(pos), ids, out);
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string text, part;
    std::vector<int> run;
    for (int32_t id : ids) {
      QK_CHECK_INDEX(id >= 0 && id < next_id_, "decode: id ", id, " is outside the vocabulary [0, ", next_id_,
                     ") of ", path_);
      auto it = special_by_id_.find(id);
      if (it == special_by_id_.end()) {
        run.push_back(id);
        continue;
      }
      decode_plain(run, part);
      text += part;
      text += ' ';
      text += it->second;
      text += ' ';
      run.clear();
    }
    decode_plain(run, part);
    return text + part;
  }

  int64_t vocab_size() const override { return next_id_; }
  int32_t eod() const override { return eod_; }
  int32_t bos() const override { return bos_; }
  int32_t pad() const override { return pad_; }

  int32_t token_to_id(std::string_view token) const override {
    for (const auto& s : special_)
      if (s.text == token) return s.id;
    const int id = sp_.PieceToId(token);  // the unk id for an unknown piece
    return id >= 0 && id < pieces_ && sp_.IdToPiece(id) == token ? id : -1;
  }

  std::string describe() const override {
    return fmt::format("SentencePiece from {}: {} pieces + {} Megatron special ids, eod {} (<EOD>)", path_,
                       pieces_, next_id_ - pieces_, eod_);
  }

 private:
  struct Special {
    std::string text;
    int32_t id;
  };

  // Megatron's _add_special_token: a piece keeps its id, a new token gets the next one.
  int32_t add_special(const std::string& t) {
    for (const auto& s : special_)
      if (s.text == t) return s.id;
    int32_t id = sp_.PieceToId(t);
    if (id < 0 || id >= pieces_ || sp_.IdToPiece(id) != t) id = next_id_++;
    special_.push_back({t, id});
    special_by_id_.emplace(id, t);
    return id;
  }

  void encode_plain(std::string_view s, std::vector<int>& ids, std::vector<int32_t>& out) const {
    if (s.empty()) return;
    ids.clear();
    const auto status = sp_.Encode(s, &ids);
    QK_CHECK(status.ok(), "SentencePiece encode failed (", path_, "): ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  void decode_plain(const std::vector<int>& ids, std::string& text) const {
    text.clear();
    if (ids.empty()) return;
    const auto status = sp_.Decode(ids, &text);
    QK_CHECK(status.ok(), "SentencePiece decode failed (", path_, "): ", status.ToString());
  }

  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  int32_t pieces_ = 0, next_id_ = 0;
  int32_t eod_ = -1, bos_ = -1, pad_ = -1;
  std::vector<Special> special_;  // in Megatron's order, which breaks ties
  std::unordered_map<int32_t, std::string> special_by_id_;
};

}  // namespace

bool sentencepiece_available() { return true; }

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model) {
  QK_CHECK(!model.empty(), "SentencePieceTokenizer needs --tokenizer-model (the .model file spm_train wrote)");
  return std::make_unique<SentencePieceTokenizer>(model);
}

}  // namespace qk::data

#else  // !QK_HAVE_SENTENCEPIECE

namespace qk::data {

bool sentencepiece_available() { return false; }

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model) {
  QK_THROW(ValueError, "SentencePieceTokenizer ('", model,
           "'): this qk was built without libsentencepiece; install libsentencepiece-dev "
           "(scripts/setup.sh does) and rebuild");
}

}  // namespace qk::data

#endif

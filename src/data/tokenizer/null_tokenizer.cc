// Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size V):
// for data that is already token ids. Text is ids separated by spaces; the
// vocabulary is V + 1 ids, the last (V) being end-of-document.
#include <charconv>
#include <string>

#include "qk/base/error.h"
#include "qk/data/tokenizer.h"

namespace qk::data {
namespace {

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size) : n_(vocab_size) {
    QK_CHECK(vocab_size > 0 && vocab_size < (int64_t{1} << 31) - 1,
             "NullTokenizer needs --vocab-size in [1, 2^31 - 1), got ", vocab_size);
  }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    // tokenize: [int(x) for x in text.split(' ')]
    for (size_t p = 0; p <= text.size();) {
      size_t e = text.find(' ', p);
      if (e == std::string_view::npos) e = text.size();
      const std::string_view word = text.substr(p, e - p);
      int64_t v = -1;
      const auto r = std::from_chars(word.data(), word.data() + word.size(), v);
      QK_CHECK(r.ec == std::errc() && r.ptr == word.data() + word.size() && v >= 0 && v <= n_,
               "NullTokenizer: '", word, "' is not a token id in [0, ", n_,
               "]; its input is token ids separated by single spaces");
      out.push_back(static_cast<int32_t>(v));
      p = e + 1;
    }
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) {
      QK_CHECK_INDEX(id >= 0 && id <= n_, "token id ", id, " is outside the vocabulary [0, ", n_ + 1, ")");
      if (!s.empty()) s += ' ';
      s += std::to_string(id);
    }
    return s;
  }

  int64_t vocab_size() const override { return n_ + 1; }
  int32_t eod() const override { return static_cast<int32_t>(n_); }
  int32_t token_to_id(std::string_view token) const override {
    int64_t v = -1;
    const auto r = std::from_chars(token.data(), token.data() + token.size(), v);
    return r.ec == std::errc() && r.ptr == token.data() + token.size() && v >= 0 && v <= n_ ? static_cast<int32_t>(v)
                                                                                          : -1;
  }
  std::string describe() const override {
    return "null tokenizer, " + std::to_string(n_ + 1) + " ids (the last is end-of-document)";
  }

 private:
  int64_t n_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_null_tokenizer(int64_t vocab_size) {
  return std::make_unique<NullTokenizer>(vocab_size);
}

}  // namespace qk::data

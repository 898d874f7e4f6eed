// Megatron's moe_freq_type: "--moe-layer-freq 2" or a Python list expression such
// as "([0]*1+[1]*26)". Megatron eval()s the text after checking it holds only
// digits, commas, brackets, parentheses, + and *; this is a small evaluator for
// exactly that grammar (integers and lists of integers, + concatenates or adds,
// * repeats or multiplies), so no Python is needed and nothing else is accepted.
#include <cctype>

#include "megatron_flag_table.h"
#include "qk/base/error.h"

namespace qk::recipes::detail {

namespace {

constexpr size_t kMaxPattern = size_t{1} << 20;  // layers; guards "[1]*10**9"-like input

struct Value {
  bool is_list = false;
  int64_t num = 0;
  std::vector<int64_t> list;
};

class Evaluator {
 public:
  explicit Evaluator(std::string_view s) : s_(s) {}

  Value run() {
    Value v = expr();
    skip_space();
    QK_CHECK(pos_ == s_.size(), "unexpected '", s_.substr(pos_, 1), "' at character ", pos_ + 1);
    return v;
  }

 private:
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }

  Value expr() {
    Value v = term();
    while (eat('+')) {
      Value r = term();
      QK_CHECK(v.is_list == r.is_list, "cannot add a list and an integer");
      if (v.is_list) {
        QK_CHECK(v.list.size() + r.list.size() <= kMaxPattern, "pattern longer than ", kMaxPattern);
        v.list.insert(v.list.end(), r.list.begin(), r.list.end());
      } else {
        v.num += r.num;
      }
    }
    return v;
  }

  Value term() {
    Value v = atom();
    while (eat('*')) {
      Value r = atom();
      QK_CHECK(!(v.is_list && r.is_list), "cannot multiply two lists");
      if (!v.is_list && !r.is_list) {
        QK_CHECK(v.num <= int64_t{1} << 31 && r.num <= int64_t{1} << 31, "number too large");
        v.num *= r.num;
        continue;
      }
      const Value& list = v.is_list ? v : r;
      const int64_t times = v.is_list ? r.num : v.num;
      Value out;
      out.is_list = true;
      if (times > 0) {
        QK_CHECK(list.list.size() * static_cast<size_t>(times) <= kMaxPattern, "pattern longer than ",
                 kMaxPattern);
        for (int64_t i = 0; i < times; ++i) out.list.insert(out.list.end(), list.list.begin(), list.list.end());
      }
      v = std::move(out);
    }
    return v;
  }

  Value atom() {
    skip_space();
    QK_CHECK(pos_ < s_.size(), "the expression ends too early");
    const char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      Value v;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        QK_CHECK(v.num < int64_t{1} << 40, "number too large");
        v.num = v.num * 10 + (s_[pos_++] - '0');
      }
      return v;
    }
    if (c == '[' || c == '(') {
      ++pos_;
      const char close = c == '[' ? ']' : ')';
      std::vector<Value> items;
      bool comma = false;
      while (!eat(close)) {
        items.push_back(expr());
        if (eat(',')) {
          comma = true;
          continue;
        }
        QK_CHECK(eat(close), "expected '", close, "' or ','");
        break;
      }
      // "(expr)" groups; "[...]" and "(a, b)" are sequences of integers.
      if (c == '(' && items.size() == 1 && !comma) return items[0];
      Value v;
      v.is_list = true;
      for (const auto& it : items) {
        QK_CHECK(!it.is_list, "nested lists are not layer patterns");
        v.list.push_back(it.num);
      }
      return v;
    }
    QK_THROW(ValueError, "unexpected '", std::string(1, c), "' at character ", pos_ + 1,
             " (allowed: digits , [ ] ( ) + *)");
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

LayerFrequency parse_layer_frequency(std::string_view text) {
  // As moe_freq_type: without '[' the text is int(text), not an expression.
  if (text.find('[') == std::string_view::npos) {
    size_t b = text.find_first_not_of(" \t\n"), e = text.find_last_not_of(" \t\n");
    const std::string_view t = b == std::string_view::npos ? std::string_view() : text.substr(b, e - b + 1);
    QK_CHECK(!t.empty() && t.find_first_not_of("0123456789") == std::string_view::npos,
             "expected an integer or a list pattern such as ([0]*1+[1]*5)");
  }
  Value v = Evaluator(text).run();
  LayerFrequency f;
  if (!v.is_list) {
    QK_CHECK(v.num >= 1, "an MoE layer every ", v.num, " layers: the frequency must be >= 1");
    f.every = v.num;
    return f;
  }
  QK_CHECK(!v.list.empty(), "the pattern is empty");
  for (int64_t x : v.list) QK_CHECK(x == 0 || x == 1, "pattern entries are 0 (dense) or 1 (MoE), got ", x);
  f.pattern = std::move(v.list);
  return f;
}

}  // namespace qk::recipes::detail

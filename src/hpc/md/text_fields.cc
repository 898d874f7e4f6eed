#include "text_fields.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "qk/base/error.h"

namespace qk::md {

std::string where(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) + ": " : file + ": ";
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string_view> split_whitespace(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) { return lower(a) == lower(b); }

double parse_double(std::string_view tok, const std::string& file, int line, std::string_view what) {
  // strtod accepts what GROMACS writes (1e-5, 3.16557e-01, .5); it needs a terminated copy.
  std::string s(trim(tok));
  char* end = nullptr;
  double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  QK_CHECK(!s.empty() && end == s.c_str() + s.size(), where(file, line), "expected ", what,
           " (a number), got '", s, "'");
  return v;
}

long long parse_int(std::string_view tok, const std::string& file, int line, std::string_view what) {
  std::string_view s = trim(tok);
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  QK_CHECK(!s.empty() && ec == std::errc() && ptr == s.data() + s.size(), where(file, line), "expected ",
           what, " (an integer), got '", s, "'");
  return v;
}

}  // namespace qk::md

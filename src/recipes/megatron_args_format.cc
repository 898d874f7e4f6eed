// Text out of the flag table: Python-style values, Megatron's argument dump
// (_print_args), --help grouped as arguments.py groups the flags, and the
// FlagInfo list.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "megatron_flag_table.h"
#include "qk/base/error.h"

namespace qk::recipes {

namespace detail {

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits d1.d2d3...e<exp>, then Python's repr layout: fixed
  // notation for 1e-4 <= |v| < 1e16 (always with a fractional part), else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  QK_INTERNAL_ASSERT(res.ec == std::errc());
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decpt = exp + 1;  // value = 0.digits x 10^decpt
  if (decpt > -4 && decpt <= 16) {
    std::string out;
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  const int ax = std::abs(exp);
  return sign + mant + "e" + (exp < 0 ? "-" : "+") + (ax < 10 ? "0" : "") + std::to_string(ax);
}

namespace {

// Python's repr of a str inside a list: single quotes unless the text has one.
std::string python_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    out += c;
  }
  return out + q;
}

template <typename T, typename F>
std::string python_list(const std::vector<T>& v, F item) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + item(v[i]);
  return out + "]";
}

std::string python_str(const std::string& s) { return s; }
std::string python_str(int64_t v) { return std::to_string(v); }
std::string python_str(double v) { return python_float(v); }
std::string python_str(bool v) { return v ? "True" : "False"; }
std::string python_str(const std::vector<std::string>& v) { return python_list(v, python_repr); }
std::string python_str(const std::vector<double>& v) {
  return python_list(v, [](double x) { return python_float(x); });
}
std::string python_str(const LayerFrequency& f) {
  if (f.pattern.empty()) return std::to_string(f.every);
  return python_list(f.pattern, [](int64_t x) { return std::to_string(x); });
}
template <typename T>
std::string python_str(const std::optional<T>& v) {
  return v ? python_str(*v) : "None";
}

}  // namespace

std::string format_value(const MegatronArgs& a, const FieldRef& f) {
  return std::visit([&](auto ptr) { return python_str(a.*ptr); }, f);
}

std::string type_name(const FlagSpec& s) {
  if (s.action == Action::kStoreTrue || s.action == Action::kStoreFalse) return "switch";
  return std::visit(
      [](auto ptr) -> std::string {
        using T = std::remove_reference_t<decltype(std::declval<MegatronArgs&>().*ptr)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::optional<int64_t>>) return "int";
        if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>>) return "float";
        if constexpr (std::is_same_v<T, std::vector<double>>) return "float list";
        if constexpr (std::is_same_v<T, LayerFrequency>) return "int or pattern";
        if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                      std::is_same_v<T, std::optional<std::vector<std::string>>>)
          return "str list";
        return "str";
      },
      s.field);
}

const std::vector<DerivedField>& derived_fields() {
  static const std::vector<DerivedField> d = {
      {"rank", &MegatronArgs::rank},
      {"world_size", &MegatronArgs::world_size},
      {"data_parallel_size", &MegatronArgs::data_parallel_size},
      {"virtual_pipeline_model_parallel_size", &MegatronArgs::virtual_pipeline_model_parallel_size},
      {"params_dtype", &MegatronArgs::params_dtype},
  };
  return d;
}
}  // namespace detail

namespace {

using detail::derived_fields;
using detail::FlagSpec;

std::string metavar(const FlagSpec& f) {
  const std::string t = detail::type_name(f);
  if (t == "switch") return "";
  std::string one;
  if (!f.choices.empty()) {
    one = "{";
    for (size_t i = 0; i < f.choices.size(); ++i) one += (i ? "," : "") + std::string(f.choices[i]);
    one += "}";
  } else if (t == "int") {
    one = "INT";
  } else if (t == "float" || t == "float list") {
    one = "FLOAT";
  } else if (t == "int or pattern") {
    one = "N|PATTERN";
  } else {
    one = "STR";
  }
  if (f.action == detail::Action::kListAny) return " [" + one + " ...]";
  if (f.action == detail::Action::kListOneOrMore) return " " + one + " [" + one + " ...]";
  return " " + one;
}

FlagInfo info_of(const FlagSpec& f) {
  static const MegatronArgs defaults;
  FlagInfo i;
  i.flag = f.flag;
  if (!f.alias.empty()) i.aliases.push_back(std::string(f.alias));
  i.dest = f.dest;
  i.group = f.group;
  i.type = detail::type_name(f);
  i.default_value = detail::format_value(defaults, f.field);
  if (i.default_value.empty()) i.default_value = "''";
  for (auto c : f.choices) i.choices.push_back(std::string(c));
  i.help = f.help;
  if (const detail::StatusRule* r = detail::find_status_rule(f.flag)) {
    i.status = r->status;
    i.status_text = r->status == FlagStatus::kNoop ? std::string(r->what) : detail::not_yet_text(*r);
    // A supported row without refused values only carries a note (e.g. --sequence-parallel at tensor size 1).
    if (r->status == FlagStatus::kSupported) i.status_text = r->fine ? "other values: " + i.status_text : "";
    i.status_depends_on_value = r->fine != nullptr;
  }
  return i;
}

}  // namespace

const char* flag_status_name(FlagStatus s) {
  switch (s) {
    case FlagStatus::kSupported: return "supported";
    case FlagStatus::kNotYet: return "not yet";
    case FlagStatus::kNoop: return "no-op";
  }
  return "?";
}

std::vector<FlagInfo> megatron_flags() {
  std::vector<FlagInfo> out;
  for (const auto& f : detail::flag_table()) out.push_back(info_of(f));
  return out;
}

std::string format_megatron_args(const MegatronArgs& a, const std::string& title) {
  // Megatron: '  {} {} {}'.format(arg, '.' * (48 - len(arg)), value), sorted by lower().
  std::vector<std::string> lines;
  std::set<std::string_view> seen;
  const auto add = [&](std::string_view name, const detail::FieldRef& field) {
    if (!seen.insert(name).second) return;
    const std::string dots(name.size() < 48 ? 48 - name.size() : 0, '.');
    lines.push_back("  " + std::string(name) + " " + dots + " " + detail::format_value(a, field));
  };
  for (const auto& f : detail::flag_table()) add(f.dest, f.field);
  for (const auto& d : derived_fields()) add(d.name, d.field);
  const auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::stable_sort(lines.begin(), lines.end(),
                   [&](const std::string& x, const std::string& y) { return lower(x) < lower(y); });
  std::string out = "------------------------ " + title + " ------------------------\n";
  for (const auto& l : lines) out += l + "\n";
  out += "-------------------- end of " + title + " ---------------------\n";
  return out;
}

std::string megatron_help(const std::string& program) {
  std::string out = "usage: " + program + " [Megatron-LM flags]\n\n" +
                    "The flags of Megatron-LM's pretrain_gpt.py (megatron/training/arguments.py), grouped as\n"
                    "Megatron groups them. Each shows its value, default and status in this build:\n"
                    "  supported  does what Megatron does\n"
                    "  NOT YET    a feature this build lacks: giving the flag (or, where noted, a value\n"
                    "             other than the default) is an error saying so\n"
                    "  no-op      accepted with one info line saying what it means here\n";
  for (auto group : detail::group_order()) {
    out += "\n" + std::string(group) + ":\n";
    for (const auto& f : detail::flag_table()) {
      if (f.group != group) continue;
      const FlagInfo i = info_of(f);
      std::string names = i.flag;
      for (const auto& al : i.aliases) names += ", " + al;
      std::string tag = i.status == FlagStatus::kSupported ? "supported"
                        : i.status == FlagStatus::kNoop    ? "no-op"
                                                           : "NOT YET";
      if (i.status == FlagStatus::kNotYet && i.status_depends_on_value) tag = "NOT YET beyond the default";
      if (i.status == FlagStatus::kSupported && i.status_depends_on_value) tag = "supported; some values NOT YET";
      // A store_false switch sets its field to False; say so rather than "default True".
      const std::string kind = f.action == detail::Action::kStoreFalse
                                   ? "switch: " + i.dest + "=False, default True"
                                   : i.type + ", default " + i.default_value;
      out += "  " + names + metavar(f) + "  (" + kind + ")  [" + tag + "]\n";
      out += "      " + i.help + "\n";
      if (!i.status_text.empty()) out += "      " + std::string(tag == "no-op" ? "no-op: " : "") + i.status_text + "\n";
    }
  }
  return out;
}

}  // namespace qk::recipes

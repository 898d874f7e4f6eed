// argparse's conventions over the flag table: --flag value, --flag=value,
// store_true/store_false switches, nargs='*'/'+' lists (words up to the next flag),
// negative numbers and scientific notation as values, the last of a repeated flag
// wins. Then the status check and parse_megatron_args, which runs every step.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "megatron_flag_table.h"
#include "qk/base/error.h"

namespace qk::recipes {

namespace detail {

const std::vector<std::string_view>& group_order() {
  static const std::vector<std::string_view> order = {
      kNetworkSize, kRegularization, kTraining, kInitialization, kLearningRate,
      kCheckpointing, kMixedPrecision, kDistributed, kValidation, kData,
      kTokenizer, kMoe, kMla, kLogging, kTransformerEngine};
  return order;
}

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = [] {
    std::vector<FlagSpec> t;
    add_model_flags(t);
    add_training_flags(t);
    // Help order: Megatron's groups, rows in table order within each.
    std::stable_sort(t.begin(), t.end(), [](const FlagSpec& a, const FlagSpec& b) {
      const auto& g = group_order();
      return std::find(g.begin(), g.end(), a.group) < std::find(g.begin(), g.end(), b.group);
    });
    return t;
  }();
  return table;
}

const FlagSpec* find_flag(std::string_view spelling) {
  for (const auto& f : flag_table())
    if (f.flag == spelling || (!f.alias.empty() && f.alias == spelling)) return &f;
  return nullptr;
}

const FlagSpec* find_flag_by_dest(std::string_view dest) {
  for (const auto& f : flag_table())
    if (f.dest == dest) return &f;
  return nullptr;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace detail

namespace {

using detail::Action;
using detail::FlagSpec;

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0' && s.find_first_of("xX") == std::string::npos;
}

// A token that starts a flag rather than being a value: "-x", "--x", but not "-1e-3".
bool is_flag_like(const std::string& s) { return s.size() > 1 && s[0] == '-' && !is_number(s); }

std::string value_kind(const FlagSpec& f) {
  const std::string t = detail::type_name(f);
  if (t == "int") return "an integer";
  if (t == "float") return "a number";
  if (t == "int or pattern") return "an integer or a list pattern";
  if (!f.choices.empty()) return "one of the choices";
  return "a value";
}

int64_t parse_int(const std::string& s, const FlagSpec& f) {
  // Python's int(): optional sign, decimal digits.
  size_t start = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  int64_t v = 0;
  const char* b = s.data() + start;
  const char* e = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(b, e, v);
  QK_CHECK(start < s.size() && ec != std::errc::invalid_argument && ptr == e, f.flag, ": '", s,
           "' is not an integer");
  QK_CHECK(ec != std::errc::result_out_of_range, f.flag, ": '", s, "' is out of the 64-bit integer range");
  return s[0] == '-' ? -v : v;
}

double parse_float(const std::string& s, const FlagSpec& f) {
  QK_CHECK(is_number(s), f.flag, ": '", s, "' is not a number (e.g. 0.1, 3e-3, 1e-6)");
  return std::strtod(s.c_str(), nullptr);
}

void check_choice(const std::string& v, const FlagSpec& f) {
  if (f.choices.empty()) return;
  for (auto c : f.choices)
    if (c == v) return;
  std::string all;
  for (auto c : f.choices) all += (all.empty() ? "" : ", ") + std::string(c);
  QK_THROW(ValueError, f.flag, ": '", v, "' is not one of the choices: ", all);
}

std::vector<std::string> split_words(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::istringstream in(v);
    for (std::string w; in >> w;) out.push_back(w);
  }
  return out;
}

// Stores the values given to one flag in its field.
void store(MegatronArgs& a, const FlagSpec& f, const std::vector<std::string>& values) {
  std::visit(
      [&](auto ptr) {
        using T = std::remove_reference_t<decltype(a.*ptr)>;
        T& field = a.*ptr;
        if constexpr (std::is_same_v<T, bool>) {
          field = f.action == Action::kStoreTrue;
        } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::optional<int64_t>>) {
          const int64_t v = parse_int(values.at(0), f);
          check_choice(std::to_string(v), f);
          field = v;
        } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>>) {
          field = parse_float(values.at(0), f);
        } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::optional<std::string>>) {
          check_choice(values.at(0), f);
          field = values.at(0);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                             std::is_same_v<T, std::optional<std::vector<std::string>>>) {
          // A quoted multi-line value (the seed's DATA_PATH) counts as its words.
          std::vector<std::string> words = split_words(values);
          for (const auto& w : words) check_choice(w, f);
          QK_CHECK(f.action != Action::kListOneOrMore || !words.empty(), f.flag, " expects at least one value");
          field = std::move(words);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::vector<double> nums;
          for (const auto& w : split_words(values)) nums.push_back(parse_float(w, f));
          QK_CHECK(!nums.empty(), f.flag, " expects at least one number");
          field = std::move(nums);
        } else if constexpr (std::is_same_v<T, LayerFrequency>) {
          try {
            field = detail::parse_layer_frequency(values.at(0));
          } catch (const ValueError& e) {
            QK_THROW(ValueError, f.flag, " '", values.at(0), "': ", e.message());
          }
        }
      },
      f.field);
}

[[noreturn]] void unknown_flag(const std::string& name) {
  const FlagSpec* best = nullptr;
  size_t best_d = SIZE_MAX;
  for (const auto& f : detail::flag_table()) {
    for (auto s : {f.flag, f.alias}) {
      if (s.empty()) continue;
      const size_t d = detail::edit_distance(name, s);
      if (d < best_d) best_d = d, best = &f;
    }
  }
  QK_THROW(ValueError, "unknown flag ", name, "; the closest known flag is ", best->flag,
           " (qk pretrain-gpt --help lists every flag)");
}

}  // namespace

ParsedMegatronArgs parse_megatron_flags(const std::vector<std::string>& argv) {
  ParsedMegatronArgs p;
  // argparse's help action wins wherever it stands, even next to mistakes.
  if (std::find_if(argv.begin(), argv.end(), [](const std::string& s) { return s == "-h" || s == "--help"; }) !=
      argv.end()) {
    p.help = true;
    return p;
  }
  const FlagSpec* prev = nullptr;
  for (size_t i = 0; i < argv.size();) {
    const std::string& tok = argv[i++];
    if (!is_flag_like(tok)) {
      std::string why = "Megatron takes no positional arguments";
      if (prev && (prev->action == Action::kStoreTrue || prev->action == Action::kStoreFalse))
        why = std::string(prev->flag) + " before it is a switch and takes no value";
      else if (prev && prev->action == Action::kStore)
        why = std::string(prev->flag) + " before it takes one value";
      QK_THROW(ValueError, "unexpected argument '", tok, "': ", why);
    }
    std::string name = tok;
    std::optional<std::string> inline_value;
    if (const size_t eq = tok.find('='); eq != std::string::npos && tok.starts_with("--")) {
      name = tok.substr(0, eq);
      inline_value = tok.substr(eq + 1);
    }
    const FlagSpec* f = detail::find_flag(name);
    if (!f) unknown_flag(name);

    std::vector<std::string> values;
    switch (f->action) {
      case Action::kStoreTrue:
      case Action::kStoreFalse:
        QK_CHECK(!inline_value, f->flag, " is a switch and takes no value (got '", tok, "')");
        break;
      case Action::kStore:
        if (inline_value) {
          values.push_back(*inline_value);
        } else {
          QK_CHECK(i < argv.size() && !is_flag_like(argv[i]), f->flag, " expects ", value_kind(*f),
                   " but none was given",
                   i < argv.size() ? " (the next argument is '" + argv[i] + "')" : " (it is the last argument)");
          values.push_back(argv[i++]);
        }
        break;
      case Action::kListAny:
      case Action::kListOneOrMore:
        // argparse: "--flag=v" is exactly one value; otherwise the words up to the next flag.
        if (inline_value) {
          values.push_back(*inline_value);
        } else {
          while (i < argv.size() && !is_flag_like(argv[i])) values.push_back(argv[i++]);
        }
        QK_CHECK(f->action != Action::kListOneOrMore || !values.empty(), f->flag,
                 " expects at least one value but none was given");
        break;
    }
    store(p.args, *f, values);

    std::string joined;
    for (const auto& v : values) joined += (joined.empty() ? "" : " ") + v;
    std::erase_if(p.given, [&](const GivenFlag& g) { return g.flag == f->flag; });
    p.given.push_back({std::string(f->flag), joined});
    prev = f;
  }
  return p;
}

void check_megatron_flag_status(ParsedMegatronArgs& p, const std::vector<std::string>& modelled) {
  std::vector<std::string> refused;
  for (const auto& g : p.given) {
    const detail::StatusRule* r = detail::find_status_rule(g.flag);
    if (!r) continue;
    const std::string as_given = g.flag + (g.value.empty() ? "" : " " + g.value);
    if (r->status == FlagStatus::kNoop) {
      p.notes.push_back(as_given + ": no effect here; " + std::string(r->what));
    } else if (r->fine ? !r->fine(p.args) : r->status == FlagStatus::kNotYet) {
      if (std::find(modelled.begin(), modelled.end(), g.flag) != modelled.end())
        p.notes.push_back(as_given + ": modelled, not run (" + std::string(r->what) + " is not built yet)");
      else
        refused.push_back(as_given + ": " + detail::not_yet_text(*r));
    } else if (!r->accepted_note.empty() && (!r->note_when || r->note_when(p.args))) {
      p.notes.push_back(as_given + ": " + std::string(r->accepted_note));
    }
  }
  if (refused.size() == 1) QK_THROW(ValueError, refused[0]);
  if (!refused.empty()) {
    std::string msg = std::to_string(refused.size()) + " flags need features this build does not have yet:";
    for (const auto& r : refused) msg += "\n  " + r;
    QK_THROW(ValueError, msg);
  }
}

ParsedMegatronArgs parse_megatron_args(const std::vector<std::string>& argv, const MegatronArgsOptions& o) {
  ParsedMegatronArgs p = parse_megatron_flags(argv);
  if (p.help) return p;
  check_megatron_flag_status(p, o.modelled_flags);
  validate_megatron_args(p.args, o);
  const auto blend = [&](const std::optional<std::vector<std::string>>& words, const char* flag,
                         std::optional<DataBlend>& out) {
    if (!words) return;
    out = parse_data_blend(*words, flag);
    if (o.check_data_files) check_data_blend_files(*out, flag);
  };
  blend(p.args.data_path, "--data-path", p.data_blend);
  blend(p.args.train_data_path, "--train-data-path", p.train_blend);
  blend(p.args.valid_data_path, "--valid-data-path", p.valid_blend);
  blend(p.args.test_data_path, "--test-data-path", p.test_blend);
  return p;
}

}  // namespace qk::recipes

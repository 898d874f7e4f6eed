#include "preprocessor.h"

#include <cctype>
#include <filesystem>

#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "text_fields.h"

namespace qk::md {
namespace {

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The identifier at the start of s (after blanks), or "".
std::string first_identifier(std::string_view s) {
  s = trim(s);
  size_t n = 0;
  while (n < s.size() && is_ident_char(s[n])) ++n;
  return std::string(s.substr(0, n));
}

}  // namespace

Preprocessor::Preprocessor(std::vector<std::string> defines, std::vector<std::string> include_dirs)
    : include_dirs_(std::move(include_dirs)) {
  for (const std::string& d : defines) {
    size_t eq = d.find('=');
    macros_[d.substr(0, eq)] = eq == std::string::npos ? "" : d.substr(eq + 1);
  }
}

std::vector<SourceLine> Preprocessor::run(const std::string& path) {
  std::vector<SourceLine> out;
  process_file(path, 0, &out);
  return out;
}

std::string Preprocessor::resolve_include(const std::string& name, const std::string& from, int line) const {
  namespace fs = std::filesystem;
  std::vector<std::string> tried;
  if (fs::path(name).is_absolute()) {
    if (fs::exists(name)) return name;
    tried.push_back(name);
  } else {
    std::vector<fs::path> dirs = {fs::path(from).parent_path()};
    for (const std::string& d : include_dirs_) dirs.emplace_back(d);
    for (const fs::path& d : dirs) {
      fs::path p = d / name;
      if (fs::exists(p)) return p.string();
      tried.push_back(p.string());
    }
  }
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
  QK_THROW(ValueError, where(from, line), "#include \"", name, "\": not found (tried ", list,
           "); set GMXDATA to GROMACS's share/gromacs folder or install gromacs-data");
}

std::string Preprocessor::substitute(const std::string& text) const {
  if (macros_.empty()) return text;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ';') {  // comments are passed through untouched
      out.append(text, i, std::string::npos);
      break;
    }
    if (is_ident_char(text[i]) && !std::isdigit(static_cast<unsigned char>(text[i]))) {
      size_t b = i;
      while (i < text.size() && is_ident_char(text[i])) ++i;
      std::string word = text.substr(b, i - b);
      auto m = macros_.find(word);
      out += m == macros_.end() ? word : m->second;
    } else if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      // A number (1.5e-3) is never a macro name, even its exponent's letters.
      while (i < text.size() && (is_ident_char(text[i]) || text[i] == '.')) out += text[i++];
    } else {
      out += text[i++];
    }
  }
  return out;
}

void Preprocessor::process_file(const std::string& path, int depth, std::vector<SourceLine>* out) {
  QK_CHECK(depth < 32, path, ": #include nested more than 32 deep (an include cycle?)");
  file_names_.push_back(path);
  const std::string* file = &file_names_.back();
  std::string text = read_file(path);
  // One entry per open #if: is this branch taken, and was an #else seen.
  struct Cond {
    bool parent_active, active, seen_else;
    int line;
  };
  std::vector<Cond> conds;
  auto active = [&] { return conds.empty() || conds.back().active; };

  size_t pos = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(pos, e - pos);
    pos = e + 1;
    const int first_line = ++lineno;
    // A trailing backslash continues the line.
    while (!line.empty() && (line.back() == '\\' || (line.back() == '\r' && line.size() > 1 &&
                                                      line[line.size() - 2] == '\\'))) {
      line.erase(line.find_last_of('\\'));
      if (pos >= text.size()) break;
      e = text.find('\n', pos);
      if (e == std::string::npos) e = text.size();
      line += text.substr(pos, e - pos);
      pos = e + 1;
      ++lineno;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string_view t = trim(line);
    if (t.empty() || t[0] != '#') {
      if (active()) out->push_back(SourceLine{substitute(line), file, first_line});
      continue;
    }
    std::string_view rest = trim(t.substr(1));
    std::string directive = first_identifier(rest);
    std::string_view arg = trim(rest.substr(directive.size()));
    if (size_t c = arg.find(';'); c != std::string_view::npos) arg = trim(arg.substr(0, c));
    if (directive == "ifdef" || directive == "ifndef") {
      std::string name = first_identifier(arg);
      QK_CHECK(!name.empty(), where(path, first_line), "#", directive, " needs a macro name");
      bool defined = macros_.count(name) > 0;
      bool taken = directive == "ifdef" ? defined : !defined;
      conds.push_back(Cond{active(), active() && taken, false, first_line});
    } else if (directive == "else") {
      QK_CHECK(!conds.empty(), where(path, first_line), "#else without #ifdef/#ifndef");
      QK_CHECK(!conds.back().seen_else, where(path, first_line), "second #else for the #if of line ",
               conds.back().line);
      conds.back().seen_else = true;
      conds.back().active = conds.back().parent_active && !conds.back().active;
    } else if (directive == "endif") {
      QK_CHECK(!conds.empty(), where(path, first_line), "#endif without #ifdef/#ifndef");
      conds.pop_back();
    } else if (!active()) {
      continue;  // other directives in a skipped branch are not looked at (as cpp)
    } else if (directive == "define") {
      std::string name = first_identifier(arg);
      QK_CHECK(!name.empty(), where(path, first_line), "#define needs a macro name");
      QK_CHECK(arg.size() == name.size() || std::isspace(static_cast<unsigned char>(arg[name.size()])),
               where(path, first_line), "#define ", name, ": function-like macros are not supported");
      macros_[name] = std::string(trim(arg.substr(name.size())));
    } else if (directive == "undef") {
      macros_.erase(first_identifier(arg));
    } else if (directive == "include") {
      QK_CHECK(arg.size() >= 2 && ((arg.front() == '"' && arg.back() == '"') ||
                                   (arg.front() == '<' && arg.back() == '>')),
               where(path, first_line), "expected #include \"file\" or <file>, got '", t, "'");
      std::string name(arg.substr(1, arg.size() - 2));
      process_file(resolve_include(name, path, first_line), depth + 1, out);
    } else {
      QK_THROW(ValueError, where(path, first_line), "preprocessor directive '#", directive,
               "' is not supported (qk md reads #include, #define, #undef, #ifdef, #ifndef, #else, #endif)");
    }
  }
  QK_CHECK(conds.empty(), where(path, conds.empty() ? 0 : conds.back().line), "#ifdef/#ifndef without #endif");
}

}  // namespace qk::md

#include "qk/base/env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "qk/base/error.h"

namespace qk::env {

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<VarInfo>& registry() {
  static std::vector<VarInfo> r;
  return r;
}
}  // namespace

void register_var(VarInfo info) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  // The same header may declare a variable in several translation units.
  for (const auto& v : r)
    if (std::string_view(v.name) == info.name) return;
  r.push_back(std::move(info));
}

std::vector<VarInfo> registered() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto r = registry();
  std::sort(r.begin(), r.end(),
            [](const VarInfo& a, const VarInfo& b) { return std::string_view(a.name) < b.name; });
  return r;
}

namespace detail {
// The one getenv of qianka (Note at the top of qk/base/env.h).
std::optional<std::string> lookup_declared(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}
}  // namespace detail

std::optional<std::string> get_raw(const char* name) {
  bool declared = false;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    for (const auto& v : registry())
      if (std::string_view(v.name) == name) declared = true;
  }
  QK_CHECK_AS(InternalError, declared, "environment variable ", name,
              " is read but not declared; declare it with QK_ENV_* (qk/base/env.h)");
  return detail::lookup_declared(name);
}

int64_t parse_int(const char* name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 0);
  QK_CHECK(!value.empty() && errno == 0 && end && *end == '\0', "environment variable ", name, "='",
           value, "' is not an integer; unset it or give a whole number");
  return v;
}

double parse_double(const char* name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  QK_CHECK(!value.empty() && errno == 0 && end && *end == '\0', "environment variable ", name, "='",
           value, "' is not a number");
  return v;
}

bool parse_bool(const char* name, const std::string& value) {
  std::string l;
  for (char c : value) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off" || l.empty()) return false;
  QK_THROW(ValueError, "environment variable ", name, "='", value,
           "' is not a boolean; use 1/0, true/false, yes/no or on/off");
}

}  // namespace qk::env

// Settings from the environment, each declared once where it is used:
//
//   QK_ENV_INT(env_threads, "QK_NUM_THREADS", 0, "Worker threads (0: one per core).");
//   int n = env_threads.get();
//
// A declared variable registers itself, so `qk check --env` and the docs can
// list every setting with its default and help. get() parses on first use and
// throws ValueError naming the variable when its value does not parse.
// Variables that something else sets per process (a launcher's RANK) have no
// default; lookup() reads them as they are now:
//
//   QK_ENV_OPTIONAL_INT(env_rank, "RANK", "This process's rank (torchrun, qk run).");
//   if (std::optional<int64_t> r = env_rank.lookup()) ...
//
// Every variable qianka reads is declared like this: there is no other
// getenv (get_raw refuses names nobody declared).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace qk::env {

struct VarInfo {
  const char* name;
  std::string default_value;  // "unset" for variables without a default
  const char* help;
};

// Every variable declared so far (static initialisation order: all of them by main()).
std::vector<VarInfo> registered();
void register_var(VarInfo info);

// The value of a declared variable (throws InternalError for a name nobody
// declared), for code that reads the registry (qk check) or a variable that
// another file declares.
std::optional<std::string> get_raw(const char* name);
namespace detail {
std::optional<std::string> lookup_declared(const char* name);  // Var's own read, unchecked
}
int64_t parse_int(const char* name, const std::string& value);
double parse_double(const char* name, const std::string& value);
bool parse_bool(const char* name, const std::string& value);

template <typename T>
class Var {
 public:
  // shown_default: what the registry shows as the default (nullptr: def).
  Var(const char* name, T def, const char* help, const char* shown_default = nullptr)
      : name_(name), default_(def) {
    register_var({name, shown_default ? std::string(shown_default) : to_string(def), help});
  }
  // Parsed once; later changes to the environment are not seen.
  T get() const {
    std::call_once(once_, [this] {
      auto raw = detail::lookup_declared(name_);
      value_ = raw ? parse(*raw) : default_;
    });
    return value_;
  }
  // Re-reads the environment (tests use this after setenv).
  T reload() const {
    auto raw = detail::lookup_declared(name_);
    return raw ? parse(*raw) : default_;
  }
  // The value set now, parsed; nullopt when unset or empty. Not cached.
  std::optional<T> lookup() const {
    auto raw = detail::lookup_declared(name_);
    if (!raw || raw->empty()) return std::nullopt;
    return parse(*raw);
  }
  const char* name() const { return name_; }
  const T& default_value() const { return default_; }

 private:
  T parse(const std::string& s) const {
    if constexpr (std::is_same_v<T, bool>) return parse_bool(name_, s);
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(parse_int(name_, s));
    else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(parse_double(name_, s));
    else return s;
  }
  static std::string to_string(const T& v) {
    if constexpr (std::is_same_v<T, bool>) return v ? "1" : "0";
    else if constexpr (std::is_arithmetic_v<T>) return std::to_string(v);
    else return v;
  }
  const char* name_;
  T default_;
  mutable std::once_flag once_;
  mutable T value_{};
};

}  // namespace qk::env

#define QK_ENV_INT(var, name, def, help) static const ::qk::env::Var<int64_t> var(name, def, help)
#define QK_ENV_DOUBLE(var, name, def, help) static const ::qk::env::Var<double> var(name, def, help)
#define QK_ENV_BOOL(var, name, def, help) static const ::qk::env::Var<bool> var(name, def, help)
#define QK_ENV_STRING(var, name, def, help) \
  static const ::qk::env::Var<std::string> var(name, def, help)
// No default: read with lookup().
#define QK_ENV_OPTIONAL_INT(var, name, help) \
  static const ::qk::env::Var<int64_t> var(name, 0, help, "unset")
#define QK_ENV_OPTIONAL_STRING(var, name, help) \
  static const ::qk::env::Var<std::string> var(name, "", help, "unset")

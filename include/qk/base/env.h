// Settings from the environment, each declared once where it is used:
//
//   QK_ENV_INT(env_threads, "QK_NUM_THREADS", 0, "Worker threads (0: one per core).");
//   int n = env_threads.get();
//
// A declared variable registers itself, so `qk check --env` and the docs can
// list every setting with its default and help. get() parses on first use and
// throws ValueError naming the variable when its value does not parse.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace qk::env {

struct VarInfo {
  const char* name;
  std::string default_value;
  const char* help;
};

// Every variable declared so far (static initialisation order: all of them by main()).
std::vector<VarInfo> registered();
void register_var(VarInfo info);

// Raw lookups, for code that cannot declare a static (tests, the launcher).
std::optional<std::string> get_raw(const char* name);
int64_t parse_int(const char* name, const std::string& value);
double parse_double(const char* name, const std::string& value);
bool parse_bool(const char* name, const std::string& value);

template <typename T>
class Var {
 public:
  Var(const char* name, T def, const char* help) : name_(name), default_(def) {
    register_var({name, to_string(def), help});
  }
  // Parsed once; later changes to the environment are not seen.
  T get() const {
    std::call_once(once_, [this] {
      auto raw = get_raw(name_);
      value_ = raw ? parse(*raw) : default_;
    });
    return value_;
  }
  // Re-reads the environment (tests use this after setenv).
  T reload() const {
    auto raw = get_raw(name_);
    return raw ? parse(*raw) : default_;
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

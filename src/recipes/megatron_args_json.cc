// MegatronArgs <-> JSON, keyed by Megatron's argument names with typed
// values, for checkpoints (the "args" a run was started with) and for
// programs that read them back (generation, export, resume checks).
#include <nlohmann/json.hpp>

#include "megatron_flag_table.h"
#include "qk/base/error.h"

namespace qk::recipes {
namespace {

using nlohmann::json;

json to_json_value(const std::string& v) { return v; }
json to_json_value(int64_t v) { return v; }
json to_json_value(double v) { return v; }
json to_json_value(bool v) { return v; }
json to_json_value(const std::vector<std::string>& v) { return v; }
json to_json_value(const std::vector<double>& v) { return v; }
json to_json_value(const LayerFrequency& f) {
  if (f.pattern.empty()) return f.every;
  return f.pattern;
}
template <typename T>
json to_json_value(const std::optional<T>& v) {
  return v ? to_json_value(*v) : json(nullptr);
}

void from_json_value(const json& j, std::string& v) { v = j.get<std::string>(); }
void from_json_value(const json& j, int64_t& v) { v = j.get<int64_t>(); }
void from_json_value(const json& j, double& v) { v = j.get<double>(); }
void from_json_value(const json& j, bool& v) { v = j.get<bool>(); }
void from_json_value(const json& j, std::vector<std::string>& v) { v = j.get<std::vector<std::string>>(); }
void from_json_value(const json& j, std::vector<double>& v) { v = j.get<std::vector<double>>(); }
void from_json_value(const json& j, LayerFrequency& f) {
  f = {};
  if (j.is_array()) f.pattern = j.get<std::vector<int64_t>>();
  else f.every = j.get<int64_t>();
}
template <typename T>
void from_json_value(const json& j, std::optional<T>& v) {
  if (j.is_null()) {
    v.reset();
    return;
  }
  T x{};
  from_json_value(j, x);
  v = std::move(x);
}

template <typename F>
void for_each_field(F f) {
  for (const auto& s : detail::flag_table()) f(std::string(s.dest), s.field);
  for (const auto& d : detail::derived_fields()) f(std::string(d.name), d.field);
}

}  // namespace

std::string megatron_args_to_json(const MegatronArgs& a) {
  json j = json::object();
  for_each_field([&](const std::string& name, const detail::FieldRef& field) {
    j[name] = std::visit([&](auto ptr) { return to_json_value(a.*ptr); }, field);
  });
  return j.dump();
}

MegatronArgs megatron_args_from_json(const std::string& text) {
  MegatronArgs a;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    QK_THROW(ValueError, "Megatron arguments: not JSON (", e.what(), ")");
  }
  QK_CHECK(j.is_object(), "Megatron arguments: expected a JSON object of argument names");
  for_each_field([&](const std::string& name, const detail::FieldRef& field) {
    if (!j.contains(name)) return;  // written by an older build: keep the default
    try {
      std::visit([&](auto ptr) { from_json_value(j.at(name), a.*ptr); }, field);
    } catch (const json::exception& e) {
      QK_THROW(ValueError, "Megatron arguments: '", name, "' has the wrong type (", e.what(), ")");
    }
  });
  return a;
}

}  // namespace qk::recipes

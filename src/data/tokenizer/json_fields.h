// Typed reads of a JSON document that came from a file (tokenizer.json,
// vocab.json, tokenizer_config.json). A field of the wrong type is a
// ValueError naming the file and the field, never nlohmann's type_error:
//
//   JsonField model{j["model"], path, "model"};
//   std::string type = model.string_or("type", "BPE");  // "tok.json: model.type: expected a string, got boolean"
//   for (JsonField e : model.array_or_empty("merges")) ...
//
// Absent and null members read as the default.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "qk/base/error.h"

namespace qk::data {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string_view file, std::string field)
      : v_(value), file_(file), field_(std::move(field)) {}

  const nlohmann::json& json() const { return v_; }
  const std::string& field() const { return field_; }
  bool is_object() const { return v_.is_object(); }

  // Whether an object member is present and not null (false when this is not an object).
  bool has(const char* key) const {
    if (!v_.is_object()) return false;
    auto it = v_.find(key);
    return it != v_.end() && !it->is_null();
  }
  // A member, which must be present; this must be an object.
  JsonField at(const char* key) const {
    expect_object();
    auto it = v_.find(key);
    QK_CHECK_AS(ValueError, it != v_.end(), where(), " has no \"", key, "\"");
    return {*it, file_, child(key)};
  }
  // Element i of an array.
  JsonField operator[](size_t i) const {
    expect(v_.is_array(), "an array");
    QK_CHECK_AS(ValueError, i < v_.size(), where(), " has ", v_.size(), " elements, needs ", i + 1);
    return {v_[i], file_, field_ + "[" + std::to_string(i) + "]"};
  }

  std::string as_string() const {
    expect(v_.is_string(), "a string");
    return v_.get<std::string>();
  }
  bool as_bool() const {
    expect(v_.is_boolean(), "true or false");
    return v_.get<bool>();
  }
  // A token id: an integer in 0..2^31-1.
  int32_t as_id() const {
    expect(v_.is_number_integer(), "an integer");
    const bool ok = v_.is_number_unsigned() ? v_.get<uint64_t>() <= static_cast<uint64_t>(kMaxId)
                                            : v_.get<int64_t>() >= 0 && v_.get<int64_t>() <= kMaxId;
    QK_CHECK_AS(ValueError, ok, where(), ": ", v_.dump(), " is not a token id (0..2^31-1)");
    return static_cast<int32_t>(v_.get<int64_t>());
  }

  std::string string_or(const char* key, std::string def) const {
    return has(key) ? at(key).as_string() : def;
  }
  bool bool_or(const char* key, bool def) const { return has(key) ? at(key).as_bool() : def; }
  // A member that must be an array when present; an empty array when absent.
  JsonField array_or_empty(const char* key) const {
    if (!has(key)) return {empty_array(), file_, child(key)};
    JsonField a = at(key);
    a.expect(a.v_.is_array(), "an array");
    return a;
  }

  // Iterates the elements of an array (this must be one).
  class Iterator {
   public:
    Iterator(const JsonField& parent, size_t i) : p_(parent), i_(i) {}
    JsonField operator*() const { return p_[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const JsonField& p_;
    size_t i_;
  };
  Iterator begin() const {
    expect(v_.is_array(), "an array");
    return {*this, 0};
  }
  Iterator end() const { return {*this, v_.is_array() ? v_.size() : 0}; }
  size_t size() const { return v_.is_array() || v_.is_object() ? v_.size() : 0; }

  void expect(bool ok, const char* what) const {
    QK_CHECK_AS(ValueError, ok, where(), ": expected ", what, ", got ", v_.type_name());
  }
  void expect_object() const { expect(v_.is_object(), "an object"); }

 private:
  // "tok.json: model.vocab", or just the file for the document itself.
  std::string where() const { return field_.empty() ? std::string(file_) : std::string(file_) + ": " + field_; }
  static constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  std::string child(const char* key) const { return field_.empty() ? key : field_ + "." + key; }
  static const nlohmann::json& empty_array() {
    static const nlohmann::json a = nlohmann::json::array();
    return a;
  }

  const nlohmann::json& v_;
  std::string_view file_;
  std::string field_;
};

}  // namespace qk::data

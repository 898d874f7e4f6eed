// An insertion-ordered map of names to values, as torch::OrderedDict: what
// named_parameters(), named_buffers() and state_dict() return.
//
//   for (const auto& p : model->named_parameters())
//     std::cout << p.key() << " " << qk::shape_str(p.value().shape()) << "\n";
//   Tensor w = model->named_parameters()["fc1.weight"];
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qk/base/error.h"

namespace qk::nn {

template <typename Key, typename Value>
class OrderedDict {
 public:
  class Item {
   public:
    Item(Key k, Value v) : kv_(std::move(k), std::move(v)) {}
    const Key& key() const { return kv_.first; }
    Value& value() { return kv_.second; }
    const Value& value() const { return kv_.second; }
    Value* operator->() { return &kv_.second; }
    const std::pair<Key, Value>& pair() const { return kv_; }

   private:
    std::pair<Key, Value> kv_;
  };

  OrderedDict() = default;
  OrderedDict(std::initializer_list<std::pair<Key, Value>> items) {
    for (const auto& [k, v] : items) insert(k, v);
  }

  // Adds a new key; a duplicate is a ValueError.
  Value& insert(Key key, Value value) {
    QK_CHECK(index_.find(key) == index_.end(), "OrderedDict: key '", key, "' already exists");
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().value();
  }
  // Adds or replaces.
  Value& insert_or_assign(Key key, Value value) {
    if (Value* v = find(key)) return *v = std::move(value);
    return insert(std::move(key), std::move(value));
  }
  Value* find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].value();
  }
  const Value* find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].value();
  }
  bool contains(const Key& key) const { return index_.count(key) != 0; }
  Value& operator[](const Key& key) {
    Value* v = find(key);
    QK_CHECK_INDEX(v != nullptr, "OrderedDict: no key '", key, "'");
    return *v;
  }
  const Value& operator[](const Key& key) const {
    const Value* v = find(key);
    QK_CHECK_INDEX(v != nullptr, "OrderedDict: no key '", key, "'");
    return *v;
  }
  Item& operator[](size_t i) { return items_.at(i); }
  const Item& operator[](size_t i) const { return items_.at(i); }

  std::vector<Key> keys() const {
    std::vector<Key> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.key());
    return out;
  }
  std::vector<Value> values() const {
    std::vector<Value> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.value());
    return out;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void clear() {
    items_.clear();
    index_.clear();
  }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<Key, size_t> index_;
};

}  // namespace qk::nn

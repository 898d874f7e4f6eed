// QK_ARG: a chained-setter field for option structs, as PyTorch's TORCH_ARG.
//
//   struct LinearOptions {
//     LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
//     QK_ARG(int64_t, in_features);
//     QK_ARG(int64_t, out_features);
//     QK_ARG(bool, bias) = true;
//   };
//   auto o = LinearOptions(5, 2).bias(false);   // o.bias() == false
//
// Each QK_ARG(T, name) declares a member name_ with a setter name(v) that
// returns *this and getters name(). It leaves the access at `private:`,
// which is why structs list their constructors first.
#pragma once

#define QK_ARG(T, name)                                        \
 public:                                                       \
  inline auto name(const T& new_##name)->decltype(*this) {     \
    this->name##_ = new_##name;                                \
    return *this;                                              \
  }                                                            \
  inline const T& name() const noexcept { return this->name##_; } \
  inline T& name() noexcept { return this->name##_; }          \
                                                               \
 private:                                                      \
  T name##_

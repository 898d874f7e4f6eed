#include "qk/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::nn {

namespace {

// "qk::nn::LinearImpl" -> "Linear".
std::string type_name(const std::type_info& ti) {
  int status = 0;
  char* d = abi::__cxa_demangle(ti.name(), nullptr, nullptr, &status);
  std::string s = (status == 0 && d) ? d : ti.name();
  std::free(d);
  size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Impl") == 0) s.resize(s.size() - 4);
  return s;
}

void check_name(const std::string& name, const char* what) {
  QK_CHECK(!name.empty() && name.find('.') == std::string::npos, what, ": name '", name,
           "' must be non-empty and contain no '.' (dots separate nested names)");
}

// Points dst's impl at src's data: every handle to dst sees the new tensor
// while its autograd identity (requires_grad, hooks) stays.
void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  d->storage = src.storage();
  d->offset = src.storage_offset();
  d->sizes = src.sizes();
  d->strides = src.strides();
  d->dtype = src.dtype();
  ++d->version;
}

void convert_all(Module& root, const std::function<Tensor(const Tensor&)>& conv) {
  NoGradGuard ng;
  for (auto& item : root.named_parameters()) {
    Tensor p = item.value();
    Tensor g = p.grad();
    set_data(p, conv(p));
    if (g.defined()) p.set_grad(conv(g));
  }
  for (auto& item : root.named_buffers()) set_data(item.value(), conv(item.value()));
}

}  // namespace

std::string Module::name() const { return name_.empty() ? type_name(typeid(*this)) : name_; }

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "register_parameter");
  QK_CHECK(!buffers_.contains(name) && !children_.contains(name), "register_parameter: '", name,
           "' is already a buffer or submodule of ", this->name());
  if (t.defined()) {
    QK_CHECK_TYPE(!requires_grad || is_floating(t.dtype()), "register_parameter: '", name,
                  "' has dtype ", dtype_name(t.dtype()), "; only floating tensors can require grad");
    t = t.detach();  // a parameter is a leaf, whatever computed its initial value
    t.requires_grad_(requires_grad);
  }
  parameters_.insert(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, "register_buffer");
  QK_CHECK(!parameters_.contains(name) && !children_.contains(name), "register_buffer: '", name,
           "' is already a parameter or submodule of ", this->name());
  if (t.defined()) t = t.detach();
  buffers_.insert(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "register_module");
  QK_CHECK(m != nullptr, "register_module: '", name, "' is an empty module");
  QK_CHECK(!parameters_.contains(name) && !buffers_.contains(name), "register_module: '", name,
           "' is already a parameter or buffer of ", this->name());
  children_.insert(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool recurse,
                     std::unordered_set<const TensorImpl*>* seen, NamedTensors& out) const {
  for (const auto& item : params ? parameters_ : buffers_) {
    if (!item.value().defined()) continue;
    if (seen && !seen->insert(item.value().impl()).second) continue;
    out.insert(prefix + item.key(), item.value());
  }
  if (!recurse) return;
  for (const auto& c : children_) c.value()->collect(prefix + c.key() + ".", params, true, seen, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", true, recurse, &seen, out);
  return out;
}

void Module::replace_parameter(const std::string& name, const Tensor& t) {
  Tensor* p = parameters_.find(name);
  QK_CHECK(p != nullptr, "replace_parameter: ", this->name(), " has no parameter '", name, "'");
  QK_CHECK(!t.defined() || t.is_leaf(), "replace_parameter: '", name,
           "' must be given a leaf tensor (a parameter), not a computed one");
  *p = t;
}

std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", false, recurse, &seen, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

std::vector<std::shared_ptr<Module>> Module::children() const { return children_.values(); }

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_children() const { return children_; }

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_modules(bool include_self) {
  OrderedDict<std::string, std::shared_ptr<Module>> out;
  if (include_self) {
    auto self = weak_from_this().lock();
    QK_CHECK(self != nullptr, "modules()/named_modules(): ", name(),
             " is not held by a std::shared_ptr; create it with std::make_shared or a module holder");
    out.insert("", self);
  }
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& prefix,
                                                                    const Module& m) {
    for (const auto& c : m.children_) {
      out.insert(prefix + c.key(), c.value());
      walk(prefix + c.key() + ".", *c.value());
    }
  };
  walk("", *this);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  return named_modules(include_self).values();
}

void Module::train(bool on) {
  is_training_ = on;
  for (const auto& c : children_) c.value()->train(on);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (const auto& c : children_) c.value()->apply(fn);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard ng;
      Tensor(p.grad()).zero_();
    }
  }
}

void Module::to(Device device) {
  convert_all(*this, [&](const Tensor& t) { return t.device() == device ? t : ops::to_device(t, device); });
}

void Module::to(DType dtype) {
  convert_all(*this, [&](const Tensor& t) {
    return !is_floating(t.dtype()) || t.dtype() == dtype ? t : ops::cast(t, dtype);
  });
}

NamedTensors Module::state_dict() const {
  NamedTensors params, buffers, out;
  collect("", true, true, nullptr, params);  // tied weights under every name
  collect("", false, true, nullptr, buffers);
  for (auto& item : params) out.insert(item.key(), item.value().detach());
  for (auto& item : buffers) out.insert(item.key(), item.value().detach());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = state_dict();
  std::string missing, unexpected;
  for (const auto& item : own)
    if (!state.contains(item.key())) missing += (missing.empty() ? "'" : ", '") + item.key() + "'";
  for (const auto& item : state)
    if (!own.contains(item.key())) unexpected += (unexpected.empty() ? "'" : ", '") + item.key() + "'";
  if (strict) {
    QK_CHECK(missing.empty() && unexpected.empty(), "load_state_dict for ", name(), ": ",
             missing.empty() ? "" : "missing keys " + missing, missing.empty() || unexpected.empty() ? "" : "; ",
             unexpected.empty() ? "" : "unexpected keys " + unexpected,
             ". Was the checkpoint saved from a different model? (strict=false loads the common keys)");
  }
  // Check every shape and dtype before copying anything, so a failed load
  // leaves the module unchanged.
  for (const auto& item : own) {
    const Tensor* src = state.find(item.key());
    if (!src) continue;
    QK_CHECK(src->defined(), "load_state_dict for ", name(), ": '", item.key(), "' is undefined");
    QK_CHECK(src->shape() == item.value().shape(), "load_state_dict for ", name(), ": size mismatch for '",
             item.key(), "': the checkpoint has shape ", shape_str(src->shape()),
             ", the model has shape ", shape_str(item.value().shape()));
    QK_CHECK_TYPE(src->dtype() == item.value().dtype(), "load_state_dict for ", name(),
                  ": dtype mismatch for '", item.key(), "': the checkpoint has ", dtype_name(src->dtype()),
                  ", the model has ", dtype_name(item.value().dtype()),
                  "; convert the model (module->to(dtype)) or the checkpoint first");
  }
  NoGradGuard ng;
  for (const auto& item : own) {
    const Tensor* src = state.find(item.key());
    if (!src) continue;
    Tensor dst = item.value();
    dst.copy_(*src);
    dst.bump_version();
  }
}

void Module::pretty_print(std::ostream& os) const { os << name() << "()"; }

void Module::print_tree(std::ostream& os, int indent) const {
  if (children_.empty()) {
    pretty_print(os);
    return;
  }
  os << name() << "(\n";
  for (const auto& c : children_) {
    os << std::string(indent + 2, ' ') << "(" << c.key() << "): ";
    c.value()->print_tree(os, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.print_tree(os, 0);
  return os;
}

}  // namespace qk::nn

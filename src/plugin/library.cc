// Building a Library of ops: definitions, kernels, backwards, and the checks
// that a typed kernel matches its schema.
#include "qk/plugin/library.h"

#include <cctype>

#include "qk/base/error.h"

namespace qk::plugin {

namespace {
bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}
}  // namespace

// ---- BackwardContext ----

const Value& BackwardContext::arg(size_t i) const {
  QK_CHECK_INDEX(i < args_.size(), "backward of ", schema_.name, ": argument ", i,
                 " out of range; the op has ", args_.size());
  return args_[i];
}

const Value& BackwardContext::arg(std::string_view name) const {
  for (size_t i = 0; i < schema_.arguments.size(); ++i)
    if (schema_.arguments[i].name == name) return args_[i];
  QK_THROW(ValueError, "backward of ", schema_.name, ": no argument named '", name,
           "'; the schema is ", schema_.str());
}

const Tensor& BackwardContext::output(size_t k) const {
  QK_CHECK_INDEX(k < outputs_.size(), "backward of ", schema_.name, ": output ", k,
                 " out of range; the op has ", outputs_.size());
  return outputs_[k];
}

const Tensor& BackwardContext::grad(size_t k) const {
  QK_CHECK_INDEX(k < grads_.size(), "backward of ", schema_.name, ": gradient ", k,
                 " out of range; the op has ", grads_.size(), " output(s)");
  return grads_[k];
}

bool BackwardContext::needs_grad(size_t i) const {
  const Value& v = arg(i);
  return v.is_tensor() && v.tensor().requires_grad();
}

// ---- OpDef ----

std::string OpDef::kernel_devices() const {
  std::string s;
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    if (!kernels[t]) continue;
    if (!s.empty()) s += ", ";
    s += device_type_name(static_cast<DeviceType>(t));
  }
  return s.empty() ? "none" : s;
}

void detail::check_kernel_signature(const OpDef& op, std::span<const ArgType> params,
                                    int outputs, const char* what) {
  const auto& args = op.schema.arguments;
  QK_CHECK_AS(TypeError, params.size() == args.size(), op.qualified_name, ": the ", what,
              " takes ", params.size(), " parameter(s) but the schema has ", args.size(),
              " argument(s): ", op.schema.str());
  for (size_t i = 0; i < params.size(); ++i)
    QK_CHECK_AS(TypeError, params[i] == args[i].type, op.qualified_name, ": parameter ", i,
                " of the ", what, " is ", arg_type_name(params[i]), " but argument '",
                args[i].name, "' of the schema is ", arg_type_name(args[i].type), ": ",
                op.schema.str());
  QK_CHECK_AS(TypeError, outputs < 0 || static_cast<size_t>(outputs) == op.schema.num_outputs,
              op.qualified_name, ": the ", what, " returns ", outputs,
              " tensor(s) but the schema has ", op.schema.num_outputs, ": ", op.schema.str());
}

// ---- OpBuilder ----

OpBuilder& OpBuilder::kernel(DeviceType device, KernelFn fn) {
  QK_CHECK(fn != nullptr, op_->qualified_name, ": null kernel for ", device_type_name(device));
  QK_CHECK(!op_->has_kernel(device), op_->qualified_name, " already has a kernel for ",
           device_type_name(device), "; register one kernel per device type");
  op_->kernels[static_cast<int>(device)] = std::move(fn);
  return *this;
}

OpBuilder& OpBuilder::backward(BackwardFn fn) {
  QK_CHECK(fn != nullptr, op_->qualified_name, ": null backward");
  QK_CHECK(op_->backward == nullptr, op_->qualified_name, " already has a backward");
  op_->backward = std::move(fn);
  return *this;
}

// ---- Library ----

Library::Library(std::string ns) : ns_(std::move(ns)) {
  QK_CHECK(is_identifier(ns_), "extension namespace '", ns_,
           "' is not an identifier (letters, digits, '_')");
}

OpBuilder Library::def(std::string_view schema) {
  auto op = std::make_unique<OpDef>();
  op->schema = parse_schema(schema);
  op->qualified_name = ns_ + "::" + op->schema.name;
  op->backward_name = op->qualified_name + ".backward";
  for (const auto& other : ops_)
    QK_CHECK(other->qualified_name != op->qualified_name, "op ", op->qualified_name,
             " is defined twice in library ", ns_, ": ", other->schema.str(), " and ",
             op->schema.str());
  ops_.push_back(std::move(op));
  return OpBuilder(*ops_.back());
}

}  // namespace qk::plugin
